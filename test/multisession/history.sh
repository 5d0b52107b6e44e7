# Sourced by run.sh (uses its q, check, ok, bad, $DB, $tmp): model history
# under concurrent readers.  Readers look a model up by name and lock the
# tables it names; gpumf_use_version switches the catalog row in one
# transaction, so readers must switch at commit and never see an error or a
# mix of two versions.
hq() { PGOPTIONS="$PGOPTIONS -c gpumf.keep_versions=2" psql -X -qAt -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }
hrecs() { q "SELECT string_agg(item::text || '/' || score::text, ',') FROM gpumf_recommend('hv', 5, 10)"; }
hq "SELECT version FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 3, model => 'hv')" >/dev/null
hr1=$(hrecs)
hq "SELECT version FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 7, model => 'hv')" >/dev/null
hr2=$(hrecs)
if [ -n "$hr1" ] && [ "$hr1" != "$hr2" ]; then ok "history: two versions that recommend differently"; else bad "history: two versions that recommend differently" "$hr1 / $hr2"; fi
check "history: both versions kept" "$(q "SELECT string_agg(version || ':' || current || ':' || tables_exist, ' ') FROM gpumf_model_versions('hv')")" "2:true:true 1:false:true"

# a switch is seen at commit, not before
psql -X -qAt -d "$DB" >"$tmp/h1.out" 2>&1 <<SQL &
BEGIN;
SELECT version FROM gpumf_use_version('hv', 1);
SELECT pg_sleep(2);
COMMIT;
SQL
hpid=$!
sleep 1
check "history: readers see the current version while a switch is uncommitted" "$(hrecs 2>&1)" "$hr2"
wait $hpid
check "history: readers see the other version once the switch commits" "$(hrecs 2>&1)" "$hr1"

# a REPEATABLE READ reader keeps its snapshot's version across a switch
psql -X -qAt -d "$DB" >"$tmp/h2.out" 2>&1 <<SQL &
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT string_agg(item::text || '/' || score::text, ',') FROM gpumf_recommend('hv', 5, 10);
SELECT pg_sleep(2);
SELECT string_agg(item::text || '/' || score::text, ',') FROM gpumf_recommend('hv', 5, 10);
COMMIT;
SQL
hpid=$!
sleep 1
hq "SELECT version FROM gpumf_use_version('hv', 2)" >/dev/null
wait $hpid
check "history: a REPEATABLE READ reader sees one version throughout a switch" "$(grep -v '^$' "$tmp/h2.out" | tr '\n' ' ')" "$hr1 $hr1 "

# many readers while the versions flip back and forth: every answer is one
# whole version's list, and no reader gets an error
readers=4; rounds=300
for r in $(seq $readers); do
  ( for i in $(seq $rounds); do
      echo "SELECT string_agg(item::text || '/' || score::text, ',') FROM gpumf_recommend('hv', 5, 10);"
      echo "SELECT pg_sleep(0.01);"
    done ) | psql -X -qAt -d "$DB" 2>&1 | grep -v '^$' >"$tmp/hr$r.out" &
  eval "hrp$r=\$!"
done
flips=0
for f in $(seq 20); do
  hq "SELECT version FROM gpumf_use_version('hv', $(( f % 2 + 1 )))" >/dev/null 2>>"$tmp/hw.err" && flips=$((flips + 1))
  sleep 0.05
done
for r in $(seq $readers); do eval "wait \$hrp$r"; done
herr=$(cat "$tmp"/hr*.out | grep -c "ERROR")
hmix=$(cat "$tmp"/hr*.out | grep -v "ERROR" | grep -cvxF -e "$hr1" -e "$hr2")
hn1=$(cat "$tmp"/hr*.out | grep -cxF "$hr1")
hn2=$(cat "$tmp"/hr*.out | grep -cxF "$hr2")
check "history: $flips switches under $readers readers, no reader error" "$herr" "0"
check "history: every answer is one version's list (no mix)" "$hmix" "0"
check "history: all $((readers * rounds)) answers arrived" "$((hn1 + hn2))" "$((readers * rounds))"
if [ "$hn1" -gt 0 ] && [ "$hn2" -gt 0 ]; then ok "history: readers saw both versions ($hn1 / $hn2)"; else bad "history: readers saw both versions" "$hn1 / $hn2"; fi
check "history: the switches all succeeded" "$flips" "20"

# a retraining after a roll-back numbers past the kept version and keeps the one it replaced
hq "SELECT version FROM gpumf_use_version('hv', 1)" >/dev/null 2>&1
check "history: a retraining after a roll-back gets version 3" "$(hq "SELECT version FROM gpumf_train('small', 'user_id', 'item_id', 'value', factors => 8, iterations => 2, model => 'hv')")" "3"
check "history: it keeps the version it replaced" "$(q "SELECT string_agg(version::text, ' ') FROM gpumf_model_versions('hv')")" "3 1"
