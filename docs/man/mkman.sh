#!/bin/sh
# Man pages from the CLI reference: imgbuild(1) and imgbuild-COMMAND(1).
#
#   sh docs/man/mkman.sh DOCS_CLI_MD IMGBUILD_BINARY OUTDIR [DOCDIR]
#
# docs/cli.md is the one CLI reference; the pages are cut from it, so they
# cannot drift from it: every `## word` section (a command: build, run...)
# becomes imgbuild-word.1, its first indented block the SYNOPSIS, the rest
# the DESCRIPTION; everything else (global options, registries, progress
# output, credentials...) becomes imgbuild.1.  A page's NAME line is the
# command's summary in `imgbuild --help` (the code's own usage text).
# Markdown to roff is go-md2man's job (Debian package go-md2man; podman's
# and buildah's man pages are made the same way).
set -eu
cli=$1 bin=$2 out=$3 docdir=${4:-/usr/local/share/doc/imgbuild}
command -v go-md2man >/dev/null 2>&1 || {
  echo "mkman: go-md2man not found (Debian: apt-get install go-md2man)" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
version=$("$bin" version | sed 's/^imgbuild //')

# The summary of each command: its first description line in the usage
# text (column 26), joined with the lines after it, cut at ';' or ' ('.
"$bin" --help | awk '
  /^Commands:/ { on = 1; next }
  /^Global options/ { on = 0 }
  !on { next }
  /^  [^ ]/ { flush(); name = $1; gsub(/[][]/, "", name); desc = ""; taking = 0 }
  {
    if (name == "" || done[name]) next
    if (length($0) > 25 && substr($0, 24, 2) == "  " && substr($0, 26, 1) != " ") {
      d = substr($0, 26); if (desc == "" && !taking) { desc = d; taking = 1 } else if (taking) desc = desc " " d
    } else if (taking) flush()
  }
  function flush() {
    if (name != "" && desc != "" && !done[name]) {
      sub(/;.*/, "", desc); sub(/ \(.*/, "", desc); print name "\t" desc; done[name] = 1
    }
    taking = 0
  }
  END { flush() }' > "$tmp/summaries"

# go-md2man keeps a wrapped line that starts with '...' or an apostrophe
# as it is, and roff reads such a line as a request: escape it.
md2man() { go-md2man -in "$1" -out "$2.tmp" && sed -e "s/^\([.']\)\([^A-Za-z]\)/\\\\\&\1\2/" "$2.tmp" > "$2" && rm -f "$2.tmp"; }

summary() { awk -F '\t' -v n="$1" '$1 == n { print $2 }' "$tmp/summaries"; }

# Split: one file per command section, the rest into main.md.
awk -v dir="$tmp" '
  /^```/ { fence = !fence }
  !fence && /^## [a-z]+$/ { file = dir "/cmd-" $2 ".md"; print $2 > (dir "/commands"); next }
  !fence && /^## / { file = "" }
  !fence && /^# / { next }
  { print > (file == "" ? dir "/main.md" : file) }' "$cli"

# A section: its leading indented block is the synopsis.
page() { # title, name line, body file
  {
    printf '%% %s 1\n\n## NAME\n%s\n\n' "$1" "$2"
    awk '
      BEGIN { state = 0 }   # 0: before the synopsis, 1: in it, 2: after it
      state == 0 && /^$/ { next }
      state == 0 && /^    / { print "## SYNOPSIS"; state = 1 }
      state == 0 { print "## DESCRIPTION"; state = 2 }
      state == 1 && !/^    / && !/^$/ { print "## DESCRIPTION"; state = 2 }
      { print }' "$3"
  }
}

for c in $(cat "$tmp/commands"); do
  s=$(summary "$c"); [ -n "$s" ] || s="the $c command"
  { page "imgbuild-$c" "imgbuild-$c - $s" "$tmp/cmd-$c.md"
    printf '\n## SEE ALSO\nimgbuild(1)\n'
  } > "$tmp/imgbuild-$c.md"
  md2man "$tmp/imgbuild-$c.md" "$out/imgbuild-$c.1"
done

{ page imgbuild "imgbuild - daemonless, rootless container image builder" "$tmp/main.md"
  printf '\n## COMMANDS\n'
  for c in $(cat "$tmp/commands"); do
    printf '**imgbuild-%s(1)**\n  %s\n\n' "$c" "$(summary "$c")"
  done
  printf '## SEE ALSO\n'
  for c in $(cat "$tmp/commands"); do printf 'imgbuild-%s(1), ' "$c"; done
  printf 'and %s (the recipe reference, security model, design).\n\n' "$docdir"
  printf '## VERSION\nimgbuild %s\n' "$version"
} > "$tmp/imgbuild.md"
md2man "$tmp/imgbuild.md" "$out/imgbuild.1"
