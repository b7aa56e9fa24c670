#!/usr/bin/env bash
# The Spring Boot shop's libraries (Spring MVC, Spring Data JPA, Hibernate, H2) for the query
# analyzer's Spring test, copied from Maven Central into target/spring-shop/lib (the Maven
# repository in target/m2, inside the repo). Prints nothing; the test compiles the app itself.
set -euo pipefail
cd "$(dirname "$0")/.."
lib="$PWD/target/spring-shop/lib"
if [ ! -f "$lib/.complete" ]; then
  rm -rf "$lib"
  mvn -q -B -f tests/apps/spring_shop/pom.xml dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$lib" -Dmaven.repo.local="$PWD/target/m2" >/dev/null
  ls "$lib"/spring-boot-*.jar "$lib"/hibernate-core-*.jar "$lib"/h2-*.jar >/dev/null \
    || { echo "spring-shop.sh: the libraries were not fetched" >&2; exit 1; }
  touch "$lib/.complete"
fi
