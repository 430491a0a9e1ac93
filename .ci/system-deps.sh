#!/usr/bin/env bash
# System tools the notebooks and tests use but pip cannot install:
#   graphviz's `dot` (diagrams), a CJK font (the chapters' Chinese system prompt in diagrams
#   exported to PNG and in plots; without one it renders as empty boxes) and Chromium (the one
#   browser test).
# As root on Debian/Ubuntu we install what is missing; otherwise we print the command.
set -u
need=()
command -v dot >/dev/null 2>&1 || need+=(graphviz)
if command -v fc-list >/dev/null 2>&1 && [ -z "$(fc-list :lang=zh 2>/dev/null)" ]; then
    need+=(fonts-noto-cjk)
fi
if [ "${NANO_ENGINE_BROWSER:-1}" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
    need+=(chromium)
fi
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing system packages: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
        || echo "WARNING: apt-get could not install ${need[*]}; the tests that need them will skip."
    exit 0
fi

echo "Missing system packages: ${need[*]} (the tests that need them will skip). Install with:"
case "$(uname -s)" in
    Darwin) echo "    brew install graphviz    # and Chromium: brew install --cask chromium (macOS has CJK fonts)" ;;
    *) if command -v apt-get >/dev/null 2>&1; then echo "    sudo apt-get install ${need[*]}"
       elif command -v dnf >/dev/null 2>&1; then echo "    sudo dnf install ${need[*]}"
       else echo "    conda install -c conda-forge graphviz font-ttf-noto-cjk"; fi ;;
esac
exit 0
