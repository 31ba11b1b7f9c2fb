#!/usr/bin/env bash
# test_doc_links.sh: the documentation's links hold. Every relative link
# [text](target) in README.md, docs/*.md, tests/README.md and tests/*/README.md
# names a file or folder that exists (relative to the document), and a #anchor
# names a heading of its target (GitHub's slugs: lower case, punctuation dropped, spaces to
# hyphens); no link leaves the repository. Also: README.md stays a front page
# (at most 200 lines) and the two commands it gives first are make targets.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
status=0
fail() { echo "FAIL: $1"; status=1; }

# slugs of a markdown file's headings, one a line (code blocks skipped)
slugs() {
    awk '/^```/ {code = !code} !code && /^#+ / {sub(/^#+ /, ""); print}' "$1" |
        tr 'A-Z' 'a-z' | sed -e 's/[^a-z0-9 _-]//g' -e 's/ /-/g'
}

shopt -s nullglob
docs=(README.md docs/*.md tests/README.md tests/*/README.md)
shopt -u nullglob
checked=0
for doc in "${docs[@]}"; do
    [ -f "$doc" ] || { fail "doc_links: $doc is missing"; continue; }
    dir=$(dirname "$doc")
    bad=0
    # the links outside code spans and indented code blocks
    while IFS= read -r target; do
        case "$target" in http://* | https://* | mailto:*) continue;; esac
        checked=$((checked + 1))
        path=${target%%#*} anchor=
        [ "$path" != "$target" ] && anchor=${target#*#}
        file=$doc
        if [ -n "$path" ]; then
            file=$dir/$path
            case "$(realpath -m "$file")" in
            "$(pwd)" | "$(pwd)"/*) ;;
            *) fail "doc_links: $doc links outside the repository: $target"; bad=1; continue;;
            esac
            [ -e "$file" ] || { fail "doc_links: $doc links to $target, which does not exist"; bad=1; continue; }
        fi
        if [ -n "$anchor" ] && ! slugs "$file" | grep -qxF -- "$anchor"; then
            fail "doc_links: $doc links to $target: no heading with that anchor in $file"
            bad=1
        fi
    done < <(grep -v '^    ' "$doc" | sed 's/`[^`]*`//g' | grep -o '\[[^]]*\]([^) ]*)' | sed 's/^.*](\(.*\))$/\1/')
    [ $bad = 0 ] && echo "PASS: doc_links_$(echo "$doc" | tr '/.' '__')"
done
[ "$checked" -gt 10 ] || fail "doc_links: only $checked links found (is the link pattern broken?)"

lines=$(wc -l <README.md)
if [ "$lines" -le 200 ]; then echo "PASS: readme_is_a_front_page ($lines lines)"; else fail "readme_is_a_front_page ($lines lines, over 200)"; fi
for target in run test-all; do
    if grep -q "^    make $target\$" README.md && grep -q "^$target:" Makefile; then
        echo "PASS: readme_command_make_${target}_is_a_target"
    else
        fail "readme_command_make_${target}_is_a_target (README.md shows it, Makefile has it)"
    fi
done
exit $status
