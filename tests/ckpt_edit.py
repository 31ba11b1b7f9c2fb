#!/usr/bin/env python3
"""ckpt_edit.py: edits a checkpoint for the tests, as a hostile user or a bug
would, keeping the checksums right so that the reader's other checks are the
ones that must refuse it (llmc/ckpt_manifest.h).

  ckpt_edit.py DIR [OLD NEW]...   replace the first OLD in DIR/manifest.json by
                                  NEW (Python escapes: \\xff is the byte 0xff),
                                  then re-seal it (manifest_crc32c; none in
                                  versions 1 and 2)
  ckpt_edit.py DIR --insert-data OFFSET N
                                  insert N zero bytes at OFFSET of
                                  DIR/rank_00000.bin (an uncompressed file) and
                                  set its bytes, raw_bytes and crc32c; then re-seal
  ckpt_edit.py DIR --unseal       make it a version 2 manifest: no seal, no
                                  data "dropped", no "data_set"
Exits 1 when an OLD is not there.
"""
import re
import sys

SEAL = b'\n  "manifest_crc32c": '


def crc32c(data, crc=0):
    table = crc32c.table
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


crc32c.table = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    crc32c.table.append(c)


def seal(text):
    at = text.rfind(SEAL)
    if at < 0:  # (version 1 or 2: no seal)
        return text
    text = text[:at + 1]
    return text + b'  "manifest_crc32c": %d\n}\n' % crc32c(text)


def main(argv):
    d, args = argv[1], argv[2:]
    path = d + '/manifest.json'
    text = open(path, 'rb').read()
    if args[:1] == ['--unseal']:
        if SEAL in text:
            text = text[:text.rfind(SEAL)].rstrip(b',') + b'\n}\n'
        text = text.replace(b'"version": 3,', b'"version": 2,')
        text = re.sub(rb'"dropped": \d+, ', b'', text)
        text = re.sub(rb'\n  "data_set": \{[^}]*\},', b'', text)
        open(path, 'wb').write(text)
        return 0
    if args[:1] == ['--insert-data']:
        off, n = int(args[1]), int(args[2])
        data = bytearray(open(d + '/rank_00000.bin', 'rb').read())
        old = len(data)
        data[off:off] = bytes(n)
        open(d + '/rank_00000.bin', 'wb').write(data)
        text = text.replace(b'"bytes": %d' % old, b'"bytes": %d' % len(data), 1)
        text = text.replace(b'"raw_bytes": %d' % old, b'"raw_bytes": %d' % len(data), 1)
        text = re.sub(rb'"crc32c": \d+', b'"crc32c": %d' % crc32c(bytes(data)), text, count=1)
        args = []
    for old, new in zip(args[0::2], args[1::2]):
        old, new = (s.encode('latin-1').decode('unicode_escape').encode('latin-1') for s in (old, new))
        if old not in text:
            print('ckpt_edit.py: %r is not in %s' % (old, path), file=sys.stderr)
            return 1
        text = text.replace(old, new, 1)
    open(path, 'wb').write(seal(text))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
