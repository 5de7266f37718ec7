#!/bin/sh
# Prints cpsguard's version, a semantic version taken from git
# (docs/releasing.md):
#   v1.2.3                    HEAD is the release tag v1.2.3
#   v1.2.3-4-gabc1234         4 commits after v1.2.3 (git describe)
#   v0.0.0-400-gabc1234       before the first release tag
#   ...-dirty                 with uncommitted changes
#   dev                       not in a git checkout (e.g. a source tarball)
# The Makefile stamps it into the binary (-X main.version), and
#   docker build --build-arg VERSION="$(scripts/version.sh)" .
# does the same for the image. Only tags vMAJOR.MINOR.PATCH count.
set -eu
cd "$(dirname "$0")/.."
if ! git rev-parse --git-dir >/dev/null 2>&1; then
	echo dev
	exit 0
fi
if git describe --tags --match 'v[0-9]*.[0-9]*.[0-9]*' --dirty 2>/dev/null; then
	exit 0
fi
dirty=""
git update-index -q --refresh >/dev/null 2>&1 || true
git diff-index --quiet HEAD -- 2>/dev/null || dirty="-dirty"
echo "v0.0.0-$(git rev-list --count HEAD)-g$(git rev-parse --short HEAD)$dirty"
