-- serving: top-n semantics, ties, joins
SET gpumf.progress = off;
CREATE TABLE likes (u int, i int);
INSERT INTO likes SELECT u, i FROM generate_series(1, 30) u, generate_series(1, 12) i WHERE (u * i) % 5 < 2;
SELECT nnz FROM gpumf_train('likes', 'u', 'i', factors => 6, iterations => 4, model => 'likes');
-- n larger than the catalogue gives every unseen item once
SELECT count(*), count(DISTINCT item) FROM gpumf_recommend('likes', 2, 100);
SELECT 12 - count(*) AS seen FROM gpumf_recommend('likes', 2, 100);
SELECT count(*) FROM likes WHERE u = 2;
-- exclude_seen => false ranks every item
SELECT count(*) FROM gpumf_recommend('likes', 2, 100, false);
-- scores equal the dot product of the stored factors
SELECT user_table AS ut, item_table AS it FROM gpumf.models WHERE name = 'likes' \gset
SELECT bool_and(abs(r.score - (SELECT sum(a * b) FROM unnest(u.factors, i.factors) AS t(a, b))) < 1e-4) AS dot_ok
  FROM gpumf_recommend('likes', 2, 100, false) r
  JOIN LATERAL (SELECT factors FROM :ut WHERE key = 2) u ON true
  JOIN LATERAL (SELECT factors FROM :it WHERE key = r.item) i ON true;
-- a user who has seen everything gets nothing
INSERT INTO likes SELECT 99, i FROM generate_series(1, 12) i;
SELECT nnz FROM gpumf_train('likes', 'u', 'i', factors => 6, iterations => 2, model => 'likes');
SELECT count(*) FROM gpumf_recommend('likes', 99, 5);
-- per-user recommendations for many users in one query (LATERAL)
SELECT count(*) AS rows, count(DISTINCT u) AS users
  FROM generate_series(1, 30) u, LATERAL gpumf_recommend('likes', u, 3) r;
