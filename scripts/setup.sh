#!/bin/bash
# One command from a fresh Debian 12 machine (as root) to recommendations:
# installs PostgreSQL 15 and build tools, builds and installs gpumf (with the
# CUDA module when nvcc is present), starts a throw-away cluster if none runs,
# loads a generated sample, trains a model and prints recommendations.
# Stops at the first failure with its error.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
source test/pgenv.sh
if ! make -s PG_CONFIG="$PG_CONFIG" >/tmp/gpumf-setup-build.log 2>&1 ||
   ! make -s PG_CONFIG="$PG_CONFIG" install >>/tmp/gpumf-setup-build.log 2>&1; then
  tail -30 /tmp/gpumf-setup-build.log
  echo "setup.sh: building or installing gpumf failed (full log: /tmp/gpumf-setup-build.log)" >&2
  exit 1
fi
psql -X -v ON_ERROR_STOP=1 <<'SQL'
CREATE EXTENSION IF NOT EXISTS gpumf;
DROP TABLE IF EXISTS sample_ratings, sample_items;
-- 5,000 users, 2,000 items, 200,000 interactions with planted taste clusters
CREATE TABLE sample_ratings AS
  SELECT user_id, item_id, value FROM gpumf_synthetic(5000, 2000, 200000, seed => 1);
CREATE TABLE sample_items AS
  SELECT i AS item_id, 'item #' || i AS title FROM generate_series(1, 2000) i;
SET gpumf.progress = off;
SELECT name, n_users, n_items, nnz, backend, device, round(final_loss::numeric, 5) AS loss,
       round(train_seconds::numeric, 2) AS train_s
  FROM gpumf_train('sample_ratings', 'user_id', 'item_id', 'value', factors => 32, iterations => 10,
                   regularization => 0.1, model => 'sample');
SELECT r.item, i.title, r.score
  FROM gpumf_recommend('sample', 42, 5) r JOIN sample_items i ON i.item_id = r.item
 ORDER BY r.score DESC;
SQL
cat <<MSG

gpumf is installed and the model 'sample' is trained.  Connect with:

    psql -h $PGHOST -p $PGPORT -U $PGUSER $PGDATABASE

(the cluster's data directory is ${GPUMF_PGDATA:-/tmp/gpumf-pgdata}, its log ${GPUMF_PGDATA:-/tmp/gpumf-pgdata}.log)
MSG
