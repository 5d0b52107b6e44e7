-- key types: int2, int4, int8, text, varchar, uuid, independently
SET gpumf.progress = off;
CREATE TABLE k (u8 bigint, u2 smallint, ut text, uv varchar(20), uu uuid,
                i4 int, it text, iu uuid, v double precision);
INSERT INTO k
SELECT 10000000000 + u, u, 'user ' || u, 'v' || u,
       md5('u' || u)::uuid, 100 + i, 'item-' || i, md5('i' || i)::uuid, 1 + (u * i) % 4
  FROM generate_series(1, 25) u, generate_series(1, 20) i
 WHERE (u * 3 + i) % 4 = 0;

SELECT user_type, item_type, n_users, n_items FROM gpumf_train('k', 'u8', 'i4', 'v', 4, 'big', iterations => 2);
SELECT count(*) FROM gpumf_recommend('big', 10000000001, 3);
SELECT count(*) FROM gpumf_recommend('big', 10000000001::numeric, 3);
SELECT count(*) FROM gpumf_recommend('big', '10000000001'::text, 3);
SELECT count(*) FROM gpumf_recommend('big', 1, 3);  -- no such user

SELECT user_type, item_type FROM gpumf_train('k', 'u2', 'it', 'v', 4, 'small_text', iterations => 2);
SELECT count(*) FROM gpumf_recommend_text('small_text', 2, 3);
SELECT count(*) FROM gpumf_recommend_text('small_text', 70000, 3);  -- out of smallint range: no rows
SELECT * FROM gpumf_recommend('small_text', 2, 3);                  -- text items need _text

SELECT user_type, item_type FROM gpumf_train('k', 'ut', 'iu', 'v', 4, 'text_uuid', iterations => 2);
SELECT count(*), min(pg_typeof(item)::text) FROM gpumf_recommend_uuid('text_uuid', 'user 3', 3);
SELECT count(*) FROM gpumf_recommend_uuid('text_uuid', 'user 3'::varchar, 3);
SELECT count(*) FROM gpumf_recommend_text('text_uuid', 'user 3', 3);
SELECT count(*) FROM gpumf_recommend_uuid('text_uuid', 'nobody', 3);
SELECT count(*) FROM gpumf_recommend_uuid('text_uuid', 'USER 3', 3);  -- keys are exact

SELECT user_type, item_type FROM gpumf_train('k', 'uv', 'i4', 'v', 4, 'varchar', iterations => 2);
SELECT count(*) FROM gpumf_recommend('varchar', 'v5', 3);

SELECT user_type, item_type FROM gpumf_train('k', 'uu', 'it', 'v', 4, 'uuid_text', iterations => 2);
SELECT count(*) FROM gpumf_recommend_text('uuid_text', md5('u3')::uuid, 3);
SELECT count(*) FROM gpumf_recommend_text('uuid_text', md5('u3'), 3);
SELECT count(*) FROM gpumf_recommend_text('uuid_text', 'not a uuid'::text, 3);

-- recommendations join back to the user's tables by the original key
CREATE TABLE items (id int PRIMARY KEY, title text);
INSERT INTO items SELECT 100 + i, 'title ' || i FROM generate_series(1, 20) i;
SELECT count(*) AS joined FROM gpumf_recommend('big', 10000000002, 5) r JOIN items i ON i.id = r.item;

-- keys at the ends of their types: one bigint key of 2^62 (whose dense-key
-- growth once looped forever), the int8 and int2 ends, each kept exactly
-- (as a new version of the model 'big': no new model id for the files after this)
SET statement_timeout = '30s';
CREATE TABLE k_ext (u int8, i int2);
INSERT INTO k_ext VALUES (4611686018427387904, 1);
SELECT n_users, n_items, nnz FROM gpumf_train('k_ext', 'u', 'i', factors => 2, iterations => 1, model => 'big');
INSERT INTO k_ext VALUES (-9223372036854775808, -32768), (9223372036854775807, 32767),
  (67108864, 0), (67108863, 0), (-1, 32767);
SELECT n_users, n_items, nnz FROM gpumf_train('k_ext', 'u', 'i', factors => 2, iterations => 1, model => 'big');
SELECT user_table AS ut, item_table AS it FROM gpumf.models WHERE name = 'big' \gset
SELECT key FROM :ut ORDER BY key;
SELECT key FROM :it ORDER BY key;
SELECT count(*) FROM gpumf_recommend('big', 9223372036854775807, 3);
SELECT gpumf_drop_model('big');
RESET statement_timeout;
