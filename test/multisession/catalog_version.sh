# Sourced by run.sh (uses its ok, bad, check, $tmp): the library serves only
# the catalog version it was built for (GPUMF_CATALOG_VERSION), and a session
# that has checked it once notices another session's DROP, CREATE and ALTER
# EXTENSION at its next call.  In a database of its own.
CDB=gpumf_catalog_version
cq() { psql -X -qAt -v ON_ERROR_STOP=1 -d "$CDB" -c "$1"; }
dropdb --if-exists "$CDB" >/dev/null 2>&1; createdb "$CDB"
cq "CREATE EXTENSION gpumf"
cq "CREATE TABLE r AS SELECT user_id, item_id, value FROM gpumf_synthetic(200, 100, 6000, seed => 7)"
cq "SELECT 1 FROM gpumf_train('r', 'user_id', 'item_id', 'value', factors => 8, iterations => 2, model => 'cv')" >/dev/null
newest=$(cq "SELECT default_version FROM pg_available_extensions WHERE name = 'gpumf'")
# one session serves (the check is cached), then another replaces the
# extension by a 0.1 one, then updates it
out=$(psql -X -qAt -d "$CDB" 2>&1 <<SQL
SELECT count(*) FROM gpumf_recommend('cv', 5, 3);
\! psql -X -qAt -d $CDB -c "DROP EXTENSION gpumf CASCADE" -c "CREATE EXTENSION gpumf VERSION '0.1'" >/dev/null 2>&1
SELECT count(*) FROM gpumf_recommend_text('cv', 5, 3);
SELECT 1 FROM gpumf_train('r', 'user_id', 'item_id', 'value', 8, 'cv', 2);
\! psql -X -qAt -d $CDB -c "ALTER EXTENSION gpumf UPDATE" >/dev/null 2>&1
SELECT version FROM gpumf_train('r', 'user_id', 'item_id', 'value', factors => 8, iterations => 2, model => 'cv');
SELECT count(*) FROM gpumf_recommend('cv', 5, 3);
SQL
)
check "catalog version: a session that served notices another session's CREATE EXTENSION VERSION '0.1'" \
  "$(grep -c "ERROR:  extension \"gpumf\" is installed at version 0.1, but the gpumf library needs version $newest" <<<"$out")" "2"
check "catalog version: the ERROR says to update, and shows no internal statement" \
  "$(grep -c "HINT:  Run ALTER EXTENSION gpumf UPDATE" <<<"$out") $(grep -ciE "QUERY:|INSERT INTO|CONTEXT:" <<<"$out")" "2 0"
check "catalog version: the same session trains and serves once another session updated it" \
  "$(grep -v -e ERROR -e DETAIL -e HINT <<<"$out" | tr '\n' ' ')" "3 1 3 "
# a catalog newer than the library (as after installing a newer gpumf and
# updating, in a session that loaded the older library): refused with a hint
# to reconnect; made here by editing pg_extension, and put back
cq "UPDATE pg_extension SET extversion = '9.9' WHERE extname = 'gpumf'"
out=$(cq "SELECT count(*) FROM gpumf_recommend('cv', 5, 3)" 2>&1)
cq "UPDATE pg_extension SET extversion = '$newest' WHERE extname = 'gpumf'"
if grep -q "installed at version 9.9, newer than version $newest" <<<"$out" && grep -q "HINT:  Reconnect" <<<"$out"; then
  ok "catalog version: a catalog newer than the library is refused with a hint to reconnect"
else bad "catalog version: a catalog newer than the library is refused with a hint to reconnect" "$out"; fi
check "catalog version: serving works again at the library's version" "$(cq "SELECT count(*) FROM gpumf_recommend('cv', 5, 3)" 2>&1)" "3"
dropdb "$CDB"
