-- privileges, row-level security, model ownership
SET gpumf.progress = off;
CREATE ROLE regress_gpumf_alice;
CREATE ROLE regress_gpumf_bob;
CREATE TABLE secret (owner text, u int, i int, v real);
INSERT INTO secret SELECT CASE WHEN u <= 10 THEN 'regress_gpumf_alice' ELSE 'other' END, u, i, 1
  FROM generate_series(1, 20) u, generate_series(1, 8) i WHERE (u + i) % 2 = 0;
GRANT USAGE ON SCHEMA public TO regress_gpumf_alice, regress_gpumf_bob;

-- no SELECT on the source: permission denied, nothing stored
SET ROLE regress_gpumf_alice;
SELECT gpumf_train('secret', 'u', 'i', 'v', 4, 'alice_model', iterations => 2);
RESET ROLE;
SELECT count(*) FROM gpumf.models WHERE name = 'alice_model';

-- row-level security: the model sees only the caller's rows
GRANT SELECT ON secret TO regress_gpumf_alice, regress_gpumf_bob;
ALTER TABLE secret ENABLE ROW LEVEL SECURITY;
CREATE POLICY own ON secret USING (owner = current_user);
SET ROLE regress_gpumf_alice;
SELECT n_rows, n_users, owner FROM gpumf_train('secret', 'u', 'i', 'v', 4, 'alice_model', iterations => 2);
SELECT count(*) > 0 AS alice_reads FROM gpumf_recommend('alice_model', 2, 3);
-- a column-level privilege is enough, a missing one is not
RESET ROLE;
CREATE TABLE cols (u int, i int, hidden real);
INSERT INTO cols VALUES (1, 1, 1), (2, 2, 2);
GRANT SELECT (u, i) ON cols TO regress_gpumf_alice;
SET ROLE regress_gpumf_alice;
SELECT nnz FROM gpumf_train('cols', 'u', 'i', model => 'alice_cols', factors => 2, iterations => 1);
SELECT gpumf_train('cols', 'u', 'i', 'hidden', model => 'alice_cols2', factors => 2, iterations => 1);

-- bob can neither read, retrain nor drop alice's model
SET ROLE regress_gpumf_bob;
SELECT count(*) FROM gpumf_recommend('alice_model', 2, 3);
SELECT gpumf_train('secret', 'u', 'i', 'v', 4, 'alice_model', iterations => 2);
SELECT gpumf_drop_model('alice_model');
-- bob trains his own model on his rows (none: RLS hides them all)
SELECT gpumf_train('secret', 'u', 'i', 'v', 4, 'bob_model', iterations => 2);

-- alice shares her model; the grant survives retraining
SET ROLE regress_gpumf_alice;
SELECT format('GRANT SELECT ON %s, %s TO regress_gpumf_bob', user_table, item_table) AS g
  FROM gpumf.models WHERE name = 'alice_model' \gset
:g;
SELECT version FROM gpumf_train('secret', 'u', 'i', 'v', 4, 'alice_model', iterations => 2);
SET ROLE regress_gpumf_bob;
SELECT count(*) > 0 AS bob_reads FROM gpumf_recommend('alice_model', 2, 3);
SET ROLE regress_gpumf_alice;
SELECT gpumf_drop_model('alice_model');
SELECT gpumf_drop_model('alice_cols');
RESET ROLE;
DROP TABLE secret, cols;
REVOKE ALL ON SCHEMA public FROM regress_gpumf_alice, regress_gpumf_bob;
DROP ROLE regress_gpumf_alice;
DROP ROLE regress_gpumf_bob;

-- objects of the caller's that shadow built-ins never run with the owner's rights
CREATE SCHEMA shadow;
CREATE FUNCTION shadow.format(text, text, bigint, integer) RETURNS text LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'shadow function called'; END $$;
CREATE FUNCTION shadow.pg_current_xact_id() RETURNS xid8 LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'shadow function called'; END $$;
CREATE TABLE shadowed (u int, i int);
INSERT INTO shadowed VALUES (1, 1), (1, 2), (2, 2);
SET search_path = shadow, public, pg_catalog;
SELECT name, version FROM gpumf_train('shadowed', 'u', 'i', factors => 2, iterations => 1);
SELECT name, version FROM gpumf_train('shadowed', 'u', 'i', factors => 2, iterations => 1);
SELECT gpumf_drop_model('shadowed');
RESET search_path;
DROP SCHEMA shadow CASCADE;
