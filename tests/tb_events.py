"""tb_events.py: reads a trainer's --tensorboard directory back and prints each
scalar as "TAG STEP VALUE" (sorted), for tests/test_train.sh.

    python3 tests/tb_events.py DIR            # this file's own TFRecord reader
    python3 tests/tb_events.py DIR --package  # TensorBoard's own reader (exit 3: not installed)

The own reader checks every record's framing and both masked CRC32Cs and
decodes the protobuf fields llmc/tensorboard.h writes; the package's reader
(tensorboard.backend.event_processing) is the check that TensorBoard itself
accepts the files.
"""
import glob
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def fields(buf):
    """(field, wire type, value) of a protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:
            raise ValueError(f"wire type {wt}")
        yield field, wt, v


def own_reader(path):
    data, out, i, version = open(path, "rb").read(), [], 0, None
    while i < len(data):
        head = data[i:i + 12]
        (n,) = struct.unpack("<Q", head[:8])
        if struct.unpack("<I", head[8:])[0] != masked(head[:8]):
            raise ValueError(f"{path}: bad length CRC at byte {i}")
        event = data[i + 12:i + 12 + n]
        if struct.unpack("<I", data[i + 12 + n:i + 16 + n])[0] != masked(event):
            raise ValueError(f"{path}: bad data CRC at byte {i}")
        i += 16 + n
        step = 0
        for f, _, v in fields(event):
            if f == 2:
                step = v
            elif f == 3:
                version = v.decode()
            elif f == 5:
                for f2, _, value in fields(v):
                    tag = val = None
                    for f3, _, x in fields(value):
                        if f3 == 1:
                            tag = x.decode()
                        elif f3 == 2:
                            (val,) = struct.unpack("<f", x)
                    out.append((tag, step, val))
    if version != "brain.Event:2":
        raise ValueError(f"{path}: no file_version record")
    return out


def package_reader(directory):
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        sys.exit(3)
    acc = event_accumulator.EventAccumulator(directory)
    acc.Reload()
    return [(tag, e.step, e.value) for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag)]


def main():
    files = glob.glob(sys.argv[1] + "/events.out.tfevents.*")
    if len(files) != 1:
        sys.exit(f"want one event file in {sys.argv[1]}, found {len(files)}")
    rows = package_reader(sys.argv[1]) if "--package" in sys.argv else own_reader(files[0])
    for tag, step, value in sorted(rows):
        print(f"{tag} {step} {value:.6g}")


if __name__ == "__main__":
    main()
