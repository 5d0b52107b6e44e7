-- Linear algebra in SQL: sparse SPD solves (gpumf_cg_solve, gpumf_spmv) and
-- least squares (gpumf_linreg, gpumf_linreg_agg, gpumf_linreg_predict).
-- Outputs are booleans and rounded values, so that they read the same on
-- the CPU and with gpumf.device = gpu.
SET extra_float_digits = 0;

------------------------------------------------------------ sparse SPD solves

-- A 2-D Poisson matrix (5-point Laplacian on a 6 x 5 grid, 30 rows) plus 0.5
-- on the diagonal, given as its lower triangle; x_true known, b = A x_true.
CREATE TABLE poisson_lower (r int, c int, v float8);
INSERT INTO poisson_lower
SELECT i, j, v FROM (
  SELECT (gx - 1) * 5 + gy AS i, (gx - 1) * 5 + gy AS j, 4.5::float8 AS v
    FROM generate_series(1, 6) gx, generate_series(1, 5) gy
  UNION ALL
  SELECT (gx - 1) * 5 + gy + 1, (gx - 1) * 5 + gy, -1
    FROM generate_series(1, 6) gx, generate_series(1, 4) gy
  UNION ALL
  SELECT gx * 5 + gy, (gx - 1) * 5 + gy, -1
    FROM generate_series(1, 5) gx, generate_series(1, 5) gy) s;
CREATE TABLE x_true AS SELECT i, sin(i) + 0.1 * i AS x FROM generate_series(1, 30) i;
-- the full matrix, for products in SQL
CREATE VIEW poisson_full AS
  SELECT r, c, v FROM poisson_lower UNION ALL SELECT c, r, v FROM poisson_lower WHERE r <> c;
CREATE TABLE rhs AS
  SELECT array_agg(b ORDER BY r) AS b FROM (
    SELECT a.r, sum(a.v * t.x) AS b FROM poisson_full a JOIN x_true t ON t.i = a.c GROUP BY a.r) s;
CREATE FUNCTION max_error(x float8[]) RETURNS float8 LANGUAGE sql AS
  $$ SELECT max(abs(u.v - t.x)) FROM unnest(x) WITH ORDINALITY u(v, i) JOIN x_true t USING (i) $$;

-- the lower triangle (mirrored), converged on the true residual
SELECT s.converged, s.residual <= 1e-10 AS residual_ok, max_error(s.x) < 1e-8 AS x_ok,
       array_length(s.x, 1) AS n, s.triangle, s.iterations BETWEEN 1 AND 100 AS iterations_ok
  FROM rhs, gpumf_cg_solve('poisson_lower', 'r', 'c', 'v', rhs.b, tolerance => 1e-10) s;
-- the GPU's SpMV: auto (the faster on each matrix, timed once), own or cusparse
SELECT setting, enumvals FROM pg_settings WHERE name = 'gpumf.spmv';
-- the upper triangle, both triangles, and duplicates summed (4.5 = 4 + 0.5)
CREATE TABLE poisson_upper AS SELECT c AS r, r AS c, v FROM poisson_lower;
CREATE TABLE poisson_both AS SELECT * FROM poisson_full;
CREATE TABLE poisson_dup AS
  SELECT r, c, CASE WHEN r = c THEN 4 ELSE v END AS v FROM poisson_lower
  UNION ALL SELECT r, r, 0.5 FROM poisson_lower WHERE r = c;
SELECT t.name, s.triangle, s.converged, max_error(s.x) < 1e-8 AS x_ok
  FROM rhs, (VALUES ('poisson_upper'), ('poisson_both'), ('poisson_dup')) t(name),
       gpumf_cg_solve(t.name::regclass, 'r', 'c', 'v', rhs.b, tolerance => 1e-10) s;
-- 0-based indices with base => 0; bigint and smallint indices, numeric values
CREATE TABLE poisson0 AS SELECT (r - 1)::bigint AS i, (c - 1)::smallint AS j, v::numeric AS a FROM poisson_lower;
SELECT s.converged, max_error(s.x) < 1e-8 AS x_ok
  FROM rhs, gpumf_cg_solve('poisson0', 'i', 'j', 'a', rhs.b, tolerance => 1e-10, base => 0) s;
-- no preconditioner
SELECT s.converged, max_error(s.x) < 1e-8 AS x_ok
  FROM rhs, gpumf_cg_solve('poisson_lower', 'r', 'c', 'v', rhs.b, tolerance => 1e-10,
                           preconditioner => 'none') s;
-- single precision: float32 vectors, float64 residual checks (refinement)
SELECT s.converged, s.residual <= 1e-8 AS residual_ok, max_error(s.x) < 1e-6 AS x_ok
  FROM rhs, gpumf_cg_solve('poisson_lower', 'r', 'c', 'v', rhs.b, arithmetic => 'single') s;
-- the solution through a 3 x 3 system, rounded
CREATE TABLE small (i int, j int, v float8);
INSERT INTO small VALUES (1, 1, 4), (2, 1, 1), (2, 2, 3), (3, 2, 1), (3, 3, 2);
SELECT array(SELECT round(v::numeric, 10) FROM unnest(s.x) v) AS x, s.converged
  FROM gpumf_cg_solve('small', 'i', 'j', 'v', ARRAY[1, 2, 3]) s;

-- gpumf_spmv equals the product computed in SQL (the symmetric matrix from
-- one triangle; and a general matrix with general => true)
SELECT max(abs(y.v - q.y)) < 1e-12 AS spmv_ok
  FROM unnest(gpumf_spmv('poisson_lower', 'r', 'c', 'v', (SELECT array_agg(x ORDER BY i) FROM x_true)))
         WITH ORDINALITY y(v, i)
  JOIN (SELECT a.r AS i, sum(a.v * t.x) AS y FROM poisson_full a JOIN x_true t ON t.i = a.c GROUP BY a.r) q USING (i);
CREATE TABLE general (r int, c int, v float8);
INSERT INTO general SELECT r, c, r * 10 + c FROM generate_series(1, 4) r, generate_series(1, 4) c WHERE (r * c) % 3 <> 1;
INSERT INTO general VALUES (2, 3, 100), (2, 3, -50);
SELECT gpumf_spmv('general', 'r', 'c', 'v', ARRAY[1, -1, 2, 0.5], general => true) =
       (SELECT array_agg(y ORDER BY r) FROM (
          SELECT r.r, coalesce(sum(g.v * x.x), 0) AS y FROM generate_series(1, 4) r(r)
            LEFT JOIN general g ON g.r = r.r
            LEFT JOIN unnest(ARRAY[1, -1, 2, 0.5]::float8[]) WITH ORDINALITY x(x, c) ON x.c = g.c
           GROUP BY r.r) s) AS general_ok;
-- the solution multiplied back gives the right-hand side
SELECT max(abs(y.v - b.v)) < 1e-8 AS ax_is_b
  FROM rhs, gpumf_cg_solve('poisson_lower', 'r', 'c', 'v', rhs.b, tolerance => 1e-12) s,
       unnest(gpumf_spmv('poisson_lower', 'r', 'c', 'v', s.x)) WITH ORDINALITY y(v, i)
  JOIN unnest((SELECT b FROM rhs)) WITH ORDINALITY b(v, i) USING (i);

-- not converging: a WARNING with the residual reached; the last iterate,
-- converged = false
SELECT s.converged, s.iterations, round(s.residual::numeric, 3) AS residual, array_length(s.x, 1) AS n
  FROM rhs, gpumf_cg_solve('poisson_lower', 'r', 'c', 'v', rhs.b, max_iterations => 2) s;

-- systems at the edges of double's range (on the CPU, whose digits are
-- fixed): a subnormal diagonal entry and a right-hand side near the largest
-- double solve to the right x, converged; a solution beyond double's range
-- is an ERROR that says so; a singular matrix's WARNING says what stopped it
SET gpumf.device = cpu;
CREATE TABLE tiny_diag (r int, c int, v float8);
INSERT INTO tiny_diag VALUES (1, 1, 4), (2, 2, 1e-320);
SELECT x, converged FROM gpumf_cg_solve('tiny_diag', 'r', 'c', 'v', ARRAY[1, 1e-20]);
SELECT x FROM gpumf_cg_solve('tiny_diag', 'r', 'c', 'v', ARRAY[1, 1]);
CREATE TABLE diag41 (r int, c int, v float8);
INSERT INTO diag41 VALUES (1, 1, 4), (2, 2, 1);
SELECT x, converged, residual FROM gpumf_cg_solve('diag41', 'r', 'c', 'v', ARRAY[1e308, 1e308]);
SELECT x, converged, residual FROM gpumf_cg_solve('diag41', 'r', 'c', 'v', ARRAY[1e308, 1e308], arithmetic => 'single');
SELECT x, converged, residual FROM gpumf_cg_solve('diag41', 'r', 'c', 'v', ARRAY[1e308, 1e308], preconditioner => 'none');
SELECT x, converged FROM gpumf_cg_solve('diag41', 'r', 'c', 'v', ARRAY[-1e308, 1e-300]);
SELECT gpumf_spmv('diag41', 'r', 'c', 'v', ARRAY[1e308, 1e308]);
CREATE TABLE singular (r int, c int, v float8);
INSERT INTO singular VALUES (1, 1, 1), (1, 2, 1), (2, 1, 1), (2, 2, 1);
SELECT converged FROM gpumf_cg_solve('singular', 'r', 'c', 'v', ARRAY[1, 2]);
DROP TABLE tiny_diag, diag41, singular;
RESET gpumf.device;

-- bad input: each a clear ERROR, and nothing happens
\set VERBOSITY terse
CREATE TABLE m (r bigint, c bigint, v float8);
-- empty matrix
SELECT x FROM gpumf_cg_solve('m', 'r', 'c', 'v', ARRAY[1, 2]);
-- not square
INSERT INTO m VALUES (1, 1, 2), (2, 2, 2), (2, 3, 0.5);
SELECT x FROM gpumf_cg_solve('m', 'r', 'c', 'v', ARRAY[1, 2, 3]);
-- rhs of the wrong length
TRUNCATE m;
INSERT INTO m VALUES (1, 1, 2), (2, 2, 2), (3, 3, 2), (3, 1, 0.5);
SELECT x FROM gpumf_cg_solve('m', 'r', 'c', 'v', ARRAY[1, 2]);
SELECT x FROM gpumf_cg_solve('m', 'r', 'c', 'v', ARRAY[1, 2, 3, 4]);
-- indices outside the matrix: below the base, beyond the largest supported
INSERT INTO m VALUES (0, 1, 1);
SELECT x FROM gpumf_cg_solve('m', 'r', 'c', 'v', ARRAY[1, 2, 3]);
UPDATE m SET r = 5000000000 WHERE r = 0;
SELECT x FROM gpumf_cg_solve('m', 'r', 'c', 'v', ARRAY[1, 2, 3]);
UPDATE m SET r = -9223372036854775807 WHERE r = 5000000000;
SELECT x FROM gpumf_cg_solve('m', 'r', 'c', 'v', ARRAY[1, 2, 3]);
DELETE FROM m WHERE r < 0;
-- x of gpumf_spmv sets the dimension
SELECT gpumf_spmv('m', 'r', 'c', 'v', ARRAY[1, 2]);
-- NaN and Infinity entries
INSERT INTO m VALUES (2, 1, 'NaN');
SELECT x FROM gpumf_cg_solve('m', 'r', 'c', 'v', ARRAY[1, 2, 3]);
UPDATE m SET v = '-Infinity' WHERE r = 2 AND c = 1;
SELECT x FROM gpumf_cg_solve('m', 'r', 'c', 'v', ARRAY[1, 2, 3]);
DELETE FROM m WHERE r = 2 AND c = 1;
-- not symmetric: both triangles given, one pair differs (named), or one side missing
INSERT INTO m VALUES (1, 3, 0.25);
SELECT x FROM gpumf_cg_solve('m', 'r', 'c', 'v', ARRAY[1, 2, 3]);
UPDATE m SET v = 0.5 WHERE r = 1 AND c = 3;
INSERT INTO m VALUES (2, 3, 0.125);
SELECT x FROM gpumf_cg_solve('m', 'r', 'c', 'v', ARRAY[1, 2, 3]);
DELETE FROM m WHERE r = 2 AND c = 3;
SELECT round(x[1]::numeric, 10) AS x1 FROM gpumf_cg_solve('m', 'r', 'c', 'v', ARRAY[1, 2, 3]);
-- a zero, missing or negative diagonal entry with Jacobi
UPDATE m SET v = 0 WHERE r = 2 AND c = 2;
SELECT x FROM gpumf_cg_solve('m', 'r', 'c', 'v', ARRAY[1, 2, 3]);
DELETE FROM m WHERE r = 2 AND c = 2;
SELECT x FROM gpumf_cg_solve('m', 'r', 'c', 'v', ARRAY[1, 2, 3]);
INSERT INTO m VALUES (2, 2, -1);
SELECT x FROM gpumf_cg_solve('m', 'r', 'c', 'v', ARRAY[1, 2, 3]);
-- found during the iteration without a preconditioner
CREATE TABLE neg (r int, c int, v float8);
INSERT INTO neg VALUES (1, 1, -1);
SELECT x FROM gpumf_cg_solve('neg', 'r', 'c', 'v', ARRAY[1], preconditioner => 'none');
-- NULLs in the matrix table name the entry
INSERT INTO neg VALUES (1, NULL, 2);
SELECT x FROM gpumf_cg_solve('neg', 'r', 'c', 'v', ARRAY[1]);
-- bad parameters, named
SELECT x FROM gpumf_cg_solve('small', 'i', 'j', 'v', ARRAY[1, 2, 3], tolerance => -1);
SELECT x FROM gpumf_cg_solve('small', 'i', 'j', 'v', ARRAY[1, 2, 3], tolerance => 'NaN');
SELECT x FROM gpumf_cg_solve('small', 'i', 'j', 'v', ARRAY[1, 2, 3], max_iterations => 0);
SELECT x FROM gpumf_cg_solve('small', 'i', 'j', 'v', ARRAY[1, 2, 3], preconditioner => 'ilu');
SELECT x FROM gpumf_cg_solve('small', 'i', 'j', 'v', ARRAY[1, 2, 3], arithmetic => 'half');
SELECT x FROM gpumf_cg_solve('small', 'i', 'j', 'v', ARRAY[1, NULL, 3]);
SELECT x FROM gpumf_cg_solve('small', 'i', 'j', 'v', ARRAY[1, 'Infinity'::float8, 3]);
SELECT x FROM gpumf_cg_solve('small', 'i', 'j', 'v', ARRAY[]::float8[]);
SELECT x FROM gpumf_cg_solve('small', 'i', 'j', 'v', ARRAY[[1, 2], [3, 4]]);
SELECT x FROM gpumf_cg_solve('small', 'i', 'j', 'v', NULL);
SELECT x FROM gpumf_cg_solve('small', 'i', 'j', 'v', ARRAY[1, 2, 3], base => NULL);
SELECT x FROM gpumf_cg_solve('small', 'i', 'j', 'w', ARRAY[1, 2, 3]);
SELECT x FROM gpumf_cg_solve('small', 'i', 'v', 'v', ARRAY[1, 2, 3]);
CREATE TABLE textvals (i int, j int, v text);
SELECT x FROM gpumf_cg_solve('textvals', 'i', 'j', 'v', ARRAY[1]);
SELECT x FROM gpumf_cg_solve('small', 'i', 'ctid', 'v', ARRAY[1, 2, 3]);
SET gpumf.spmv = 'dense';
\set VERBOSITY default

-- the matrix is read with the caller's privileges (column privileges suffice)
CREATE ROLE regress_gpumf_linalg;
SET ROLE regress_gpumf_linalg;
SELECT x FROM gpumf_cg_solve('small', 'i', 'j', 'v', ARRAY[1, 2, 3]);
RESET ROLE;
GRANT SELECT (i, j, v) ON small TO regress_gpumf_linalg;
SET ROLE regress_gpumf_linalg;
SELECT converged FROM gpumf_cg_solve('small', 'i', 'j', 'v', ARRAY[1, 2, 3]);
RESET ROLE;
REVOKE SELECT (i, j, v) ON small FROM regress_gpumf_linalg;

------------------------------------------------------------ least squares

-- NIST StRD Longley: y (employment), x1 .. x6; certified B0 .. B6 and their
-- standard deviations; every one to at least 8 significant digits
CREATE TABLE longley (y float8, x1 float8, x2 float8, x3 float8, x4 float8, x5 float8, x6 float8);
INSERT INTO longley VALUES
  (60323, 83.0, 234289, 2356, 1590, 107608, 1947), (61122, 88.5, 259426, 2325, 1456, 108632, 1948),
  (60171, 88.2, 258054, 3682, 1616, 109773, 1949), (61187, 89.5, 284599, 3351, 1650, 110929, 1950),
  (63221, 96.2, 328975, 2099, 3099, 112075, 1951), (63639, 98.1, 346999, 1932, 3594, 113270, 1952),
  (64989, 99.0, 365385, 1870, 3547, 115094, 1953), (63761, 100.0, 363112, 3578, 3350, 116219, 1954),
  (66019, 101.2, 397469, 2904, 3048, 117388, 1955), (67857, 104.6, 419180, 2822, 2857, 118734, 1956),
  (68169, 108.4, 442769, 2936, 2798, 120445, 1957), (66513, 110.8, 444546, 4681, 2637, 121950, 1958),
  (68655, 112.6, 482704, 3813, 2552, 123366, 1959), (69564, 114.2, 502601, 3931, 2514, 125368, 1960),
  (69331, 115.7, 518173, 4806, 2572, 127852, 1961), (70551, 116.9, 554894, 4007, 2827, 130081, 1962);
CREATE TABLE longley_cert (j int, b float8, sd float8);
INSERT INTO longley_cert VALUES
  (1, -3482258.63459582, 890420.383607373), (2, 15.0618722713733, 84.9149257747669),
  (3, -0.358191792925910e-01, 0.334910077722432e-01), (4, -2.02022980381683, 0.488399681651699),
  (5, -1.03322686717359, 0.214274163161675), (6, -0.511041056535807e-01, 0.226073200069370),
  (7, 1829.15146461355, 455.478499142212);
-- equal to 1e-9 relative, elementwise
CREATE FUNCTION same(a float8[], b float8[]) RETURNS bool LANGUAGE sql IMMUTABLE AS
  $$ SELECT bool_and(abs(u - v) <= 1e-9 * greatest(abs(u), abs(v), 1e-300)) FROM unnest(a, b) t(u, v) $$;
-- digits of agreement (log relative error)
CREATE FUNCTION lre(a float8, b float8) RETURNS float8 LANGUAGE sql IMMUTABLE AS
  $$ SELECT CASE WHEN a = b THEN 17 ELSE -log(abs(a - b) / abs(b)) END $$;
CREATE TABLE longley_fit AS SELECT * FROM gpumf_linreg('longley', 'y', ARRAY['x1', 'x2', 'x3', 'x4', 'x5', 'x6']);
SELECT terms, rows_used, rows_skipped FROM longley_fit;
SELECT min(lre(f.coef[c.j], c.b)) >= 8 AS coef_8_digits, min(lre(f.std_err[c.j], c.sd)) >= 8 AS sd_8_digits,
       lre(min(f.residual_se), 304.854073561965) >= 8 AS residual_sd_ok,
       lre(min(f.r2), 0.995479004577296) >= 8 AS r2_ok,
       min(f.condition_number) BETWEEN 4.5e9 AND 5.2e9 AS condition_number_ok
  FROM longley_fit f, longley_cert c;
SELECT round(coef[2]::numeric, 6) AS b1, round(std_err[7]::numeric, 4) AS sd6,
       round(t_stat[1]::numeric, 4) AS t0, round(p_value[1]::numeric, 6) AS p0,
       round(adj_r2::numeric, 8) AS adj_r2
  FROM longley_fit;

-- NIST StRD Norris: y on x (36 rows), to at least 8 digits
CREATE TABLE norris (y float8, x float8);
INSERT INTO norris VALUES
  (0.1, 0.2), (338.8, 337.4), (118.1, 118.2), (888.0, 884.6), (9.2, 10.1), (228.1, 226.5),
  (668.5, 666.3), (998.5, 996.3), (449.1, 448.6), (778.9, 777.0), (559.2, 558.2), (0.3, 0.4),
  (0.1, 0.6), (778.1, 775.5), (668.8, 666.9), (339.3, 338.0), (448.9, 447.5), (10.8, 11.6),
  (557.7, 556.0), (228.3, 228.1), (998.0, 995.8), (888.8, 887.6), (119.6, 120.2), (0.3, 0.3),
  (0.6, 0.3), (557.6, 556.8), (339.3, 339.1), (888.0, 887.2), (998.5, 999.0), (778.9, 779.0),
  (10.2, 11.1), (117.6, 118.3), (228.9, 229.2), (668.4, 669.1), (449.2, 448.9), (0.2, 0.5);
SELECT lre(coef[1], -0.262323073774029) >= 8 AND lre(coef[2], 1.00211681802045) >= 8 AS coef_ok,
       lre(std_err[1], 0.232818234301152) >= 8 AND lre(std_err[2], 0.429796848199937e-03) >= 8 AS sd_ok,
       lre(residual_se, 0.884796396144373) >= 8 AND lre(r2, 0.999993745883712) >= 8 AS fit_ok,
       rows_used
  FROM gpumf_linreg('norris', 'y', ARRAY['x']);

-- polynomial columns x .. x^10 on [0, 1] (condition number ~1e8) against a
-- float64 Householder QR written here in PL/pgSQL: coefficients and standard
-- errors to 1e-6 relative, with and without an intercept
CREATE TABLE poly AS
  SELECT i, x, power(x, 2) AS x2, power(x, 3) AS x3, power(x, 4) AS x4, power(x, 5) AS x5,
         power(x, 6) AS x6, power(x, 7) AS x7, power(x, 8) AS x8, power(x, 9) AS x9, power(x, 10) AS x10
    FROM (SELECT i, (i * 0.618033988749895) - floor(i * 0.618033988749895) AS x
            FROM generate_series(1, 300) i) s;
ALTER TABLE poly ADD COLUMN y float8;
UPDATE poly SET y = 0.7 - 0.9 * x + 1.1 * x2 - 0.6 * x3 + 1.3 * x4 - 0.8 * x5 + 1.2 * x6
                  - 1.4 * x7 + 0.5 * x8 - 1.0 * x9 + 0.9 * x10 + 1e-7 * (((i * 7919) % 1000) / 500.0 - 1);
-- least squares of y on the columns of A (n x p, column-major in a), by Householder QR
CREATE FUNCTION ref_qr(a float8[], y float8[], n int, p int, OUT coef float8[], OUT se float8[])
LANGUAGE plpgsql AS $$
DECLARE
  nrm float8; alpha float8; vv float8; s float8; rss float8 := 0; sigma float8;
  v float8[]; ri float8[] := array_fill(0::float8, ARRAY[p * p]);
BEGIN
  FOR j IN 1 .. p LOOP
    nrm := 0;
    FOR i IN j .. n LOOP nrm := nrm + a[(j - 1) * n + i] ^ 2; END LOOP;
    nrm := sqrt(nrm);
    alpha := CASE WHEN a[(j - 1) * n + j] > 0 THEN -nrm ELSE nrm END;
    v := array_fill(0::float8, ARRAY[n]);
    FOR i IN j .. n LOOP v[i] := a[(j - 1) * n + i]; END LOOP;
    v[j] := v[j] - alpha;
    vv := 0;
    FOR i IN j .. n LOOP vv := vv + v[i] ^ 2; END LOOP;
    FOR c IN j .. p + 1 LOOP      -- column p + 1 is y
      s := 0;
      FOR i IN j .. n LOOP
        s := s + v[i] * CASE WHEN c <= p THEN a[(c - 1) * n + i] ELSE y[i] END;
      END LOOP;
      s := 2 * s / vv;
      FOR i IN j .. n LOOP
        IF c <= p THEN a[(c - 1) * n + i] := a[(c - 1) * n + i] - s * v[i];
        ELSE y[i] := y[i] - s * v[i]; END IF;
      END LOOP;
    END LOOP;
  END LOOP;
  coef := array_fill(0::float8, ARRAY[p]);
  FOR i IN REVERSE p .. 1 LOOP
    s := y[i];
    FOR j IN i + 1 .. p LOOP s := s - a[(j - 1) * n + i] * coef[j]; END LOOP;
    coef[i] := s / a[(i - 1) * n + i];
  END LOOP;
  FOR i IN p + 1 .. n LOOP rss := rss + y[i] ^ 2; END LOOP;
  sigma := sqrt(rss / (n - p));
  -- R^-1, column by column (upper triangular)
  FOR j IN 1 .. p LOOP
    ri[(j - 1) * p + j] := 1 / a[(j - 1) * n + j];
    FOR i IN REVERSE j - 1 .. 1 LOOP
      s := 0;
      FOR l IN i + 1 .. j LOOP s := s + a[(l - 1) * n + i] * ri[(j - 1) * p + l]; END LOOP;
      ri[(j - 1) * p + i] := -s / a[(i - 1) * n + i];
    END LOOP;
  END LOOP;
  se := array_fill(0::float8, ARRAY[p]);
  FOR i IN 1 .. p LOOP
    s := 0;
    FOR j IN i .. p LOOP s := s + ri[(j - 1) * p + i] ^ 2; END LOOP;
    se[i] := sigma * sqrt(s);
  END LOOP;
END $$;
CREATE FUNCTION poly_design(intercept bool) RETURNS float8[] LANGUAGE sql AS $$
  SELECT CASE WHEN intercept THEN array_fill(1::float8, ARRAY[300]) ELSE '{}'::float8[] END ||
         (SELECT array_agg(v ORDER BY c, i) FROM poly,
            LATERAL (VALUES (1, x), (2, x2), (3, x3), (4, x4), (5, x5), (6, x6), (7, x7), (8, x8),
                            (9, x9), (10, x10)) t(c, v)) $$;
SELECT intercept, max(abs(f.coef[j] - r.coef[j]) / abs(r.coef[j])) < 1e-6 AS coef_ok,
       max(abs(f.std_err[j] - r.se[j]) / abs(r.se[j])) < 1e-6 AS se_ok,
       min(f.condition_number) > 1e7 AS ill_conditioned
  FROM (VALUES (true), (false)) v(intercept),
       gpumf_linreg('poly', 'y', ARRAY['x', 'x2', 'x3', 'x4', 'x5', 'x6', 'x7', 'x8', 'x9', 'x10'], intercept) f,
       ref_qr(poly_design(intercept), (SELECT array_agg(y ORDER BY i) FROM poly), 300,
              10 + intercept::int) r,
       generate_series(1, 10 + intercept::int) j
 GROUP BY intercept ORDER BY intercept;

-- rank deficiency: an ERROR naming the collinear columns by their SQL names
CREATE TABLE collinear AS
  SELECT i, sin(i) AS a, cos(i) AS "B", sin(i) + 2 * cos(i) AS c, 3.5 AS k, 0.0 AS z, i % 7 + sin(i) AS y
    FROM generate_series(1, 50) i;
SELECT coef FROM gpumf_linreg('collinear', 'y', ARRAY['a', 'B', 'c']);
SELECT coef FROM gpumf_linreg('collinear', 'y', ARRAY['a', 'k']);
SELECT coef FROM gpumf_linreg('collinear', 'y', ARRAY['a', 'z'], intercept => false);
SELECT terms, array(SELECT round(v::numeric, 6) FROM unnest(coef) v) AS coef
  FROM gpumf_linreg('collinear', 'y', ARRAY['a', 'k'], intercept => false);

-- read with the caller's privileges; row-level security applies
ALTER TABLE norris ENABLE ROW LEVEL SECURITY;
CREATE POLICY small_x ON norris FOR SELECT TO regress_gpumf_linalg USING (x < 500);
GRANT SELECT ON norris TO regress_gpumf_linalg;
SET ROLE regress_gpumf_linalg;
SELECT rows_used FROM gpumf_linreg('norris', 'y', ARRAY['x']);
SELECT rows_used FROM gpumf_linreg('longley', 'y', ARRAY['x1']);
RESET ROLE;
REVOKE SELECT ON norris FROM regress_gpumf_linalg;
DROP POLICY small_x ON norris;
ALTER TABLE norris DISABLE ROW LEVEL SECURITY;

-- rows with a NULL in y or any x are skipped and counted
CREATE TABLE holes AS SELECT * FROM norris;
INSERT INTO holes VALUES (NULL, 1), (5, NULL), (NULL, NULL);
SELECT rows_used, rows_skipped, same(coef, (SELECT coef FROM gpumf_linreg('norris', 'y', ARRAY['x']))) AS same_fit
  FROM gpumf_linreg('holes', 'y', ARRAY['x']);

-- the aggregate: per group the same as a separate fit of the group's rows
CREATE TABLE grouped AS
  SELECT g, x1, x2, g + (2 - g) * x1 + 0.5 * g * x2 + 0.1 * sin(17 * i) AS y
    FROM (SELECT i, i % 3 AS g, cos(i) AS x1, sin(i * 1.3) AS x2 FROM generate_series(1, 3000) i) s;
INSERT INTO grouped VALUES (1, NULL, 1, 1), (2, 0.5, 0.5, NULL);
CREATE VIEW group1 AS SELECT * FROM grouped WHERE g = 1;
SELECT g, (f).terms, (f).rows_used, (f).rows_skipped,
       array(SELECT round(v::numeric, 4) FROM unnest((f).coef) v) AS coef
  FROM (SELECT g, gpumf_linreg_agg(y, ARRAY[x1, x2]) AS f FROM grouped GROUP BY g) s ORDER BY g;
SELECT same((a).coef, (t).coef) AND same((a).std_err, (t).std_err) AND same((a).p_value, (t).p_value)
       AND abs((a).r2 - (t).r2) < 1e-12 AND (a).rows_used = (t).rows_used
       AND (a).rows_skipped = (t).rows_skipped AS aggregate_equals_table_fit
  FROM (SELECT gpumf_linreg_agg(y, ARRAY[x1, x2]) AS a FROM grouped WHERE g = 1) s,
       gpumf_linreg('group1', 'y', ARRAY['x1', 'x2']) t;
-- without an intercept; a group with no usable row gives NULL
SELECT (gpumf_linreg_agg(y, ARRAY[x1, x2], false)).terms FROM grouped WHERE g = 0;
SELECT gpumf_linreg_agg(y, ARRAY[x1]) IS NULL AS no_fit FROM grouped WHERE x1 IS NULL;

-- a parallel plan (partial states serialised, combined) gives the same fit
CREATE TABLE serial_fit AS
  SELECT g, gpumf_linreg_agg(y, ARRAY[x1, x2]) AS f FROM grouped GROUP BY g;
CREATE TABLE serial_all AS SELECT gpumf_linreg_agg(y, ARRAY[x1, x2]) AS f FROM grouped;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
SET parallel_leader_participation = off;
EXPLAIN (COSTS OFF) SELECT gpumf_linreg_agg(y, ARRAY[x1, x2]) FROM grouped;
SELECT same((p.f).coef, (s.f).coef) AND same((p.f).std_err, (s.f).std_err)
       AND (p.f).rows_used = (s.f).rows_used AND (p.f).rows_skipped = (s.f).rows_skipped AS parallel_same
  FROM (SELECT gpumf_linreg_agg(y, ARRAY[x1, x2]) AS f FROM grouped) p, serial_all s;
SELECT bool_and(same((p.f).coef, (s.f).coef) AND (p.f).rows_used = (s.f).rows_used) AS parallel_groups_same
  FROM (SELECT g, gpumf_linreg_agg(y, ARRAY[x1, x2]) AS f FROM grouped GROUP BY g) p JOIN serial_fit s USING (g);
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather;
RESET parallel_leader_participation;

-- prediction: intercept first when coef has one more entry than x
SELECT gpumf_linreg_predict(ARRAY[1, 2, -3], ARRAY[0.5, 0.25]) AS with_intercept,
       gpumf_linreg_predict(ARRAY[2, -3], ARRAY[0.5, 0.25]) AS without,
       gpumf_linreg_predict(ARRAY[1, 2], ARRAY[NULL, 1]) AS with_null;
SELECT round(gpumf_linreg_predict(coef, ARRAY[x1, x2, x3, x4, x5, x6])::numeric, 3) AS fitted, y
  FROM longley_fit, longley ORDER BY x6 LIMIT 3;
SELECT gpumf_linreg_predict(ARRAY[1e308, 1e308], ARRAY[10]);

-- values beyond about 1e154 (whose squares overflow double), and an x
-- 1e200 times larger than y: the same fit as of the values scaled to 1
CREATE TABLE ls_plain AS SELECT g, (2 * g + g % 3)::float8 AS y, g::float8 AS x FROM generate_series(1, 20) g;
CREATE VIEW ls_big_x AS SELECT y, x * 1e200 AS x FROM ls_plain;
CREATE VIEW ls_big_y AS SELECT y * 1e300 AS y, x FROM ls_plain;
SELECT abs(b.coef[2] * 1e200 / p.coef[2] - 1) < 1e-12 AS slope_same, abs(b.coef[1] / p.coef[1] - 1) < 1e-12 AS intercept_same,
       abs(b.r2 - p.r2) < 1e-12 AS r2_same
  FROM gpumf_linreg('ls_plain', 'y', ARRAY['x']) p, gpumf_linreg('ls_big_x', 'y', ARRAY['x']) b;
SELECT abs(b.coef[2] / 1e300 / p.coef[2] - 1) < 1e-12 AS slope_same, abs(b.r2 - p.r2) < 1e-12 AS r2_same,
       abs(b.residual_se / 1e300 / p.residual_se - 1) < 1e-12 AS residual_se_same
  FROM gpumf_linreg('ls_plain', 'y', ARRAY['x']) p, gpumf_linreg('ls_big_y', 'y', ARRAY['x']) b;
SELECT abs((a).r2 - p.r2) < 1e-12 AS aggregate_r2_same
  FROM (SELECT gpumf_linreg_agg(y, ARRAY[x]) AS a FROM ls_big_y) g, gpumf_linreg('ls_plain', 'y', ARRAY['x']) p;
DROP VIEW ls_big_x, ls_big_y;
DROP TABLE ls_plain;

-- bad input for least squares
\set VERBOSITY terse
SELECT gpumf_linreg_predict(ARRAY[1, 2, 3, 4], ARRAY[0.5, 0.25]);
SELECT coef FROM gpumf_linreg('longley', 'y', ARRAY['x1', NULL]);
SELECT coef FROM gpumf_linreg('longley', 'y', ARRAY['x1', 'x1']);
SELECT coef FROM gpumf_linreg('longley', 'y', ARRAY['x9']);
SELECT coef FROM gpumf_linreg('textvals', 'v', ARRAY['i']);
SELECT coef FROM gpumf_linreg('longley', 'y', ARRAY[]::name[], intercept => false);
SELECT terms, round(coef[1]::numeric, 4) AS mean FROM gpumf_linreg('longley', 'y', ARRAY[]::name[]);
CREATE TABLE nothing (y float8, x float8);
SELECT coef FROM gpumf_linreg('nothing', 'y', ARRAY['x']);
SELECT coef FROM gpumf_linreg('neg', 'v', ARRAY['c']);
SELECT coef FROM gpumf_linreg('holes', 'y', ARRAY['x'], intercept => NULL);
INSERT INTO holes VALUES (1, 'NaN');
SELECT coef FROM gpumf_linreg('holes', 'y', ARRAY['x']);
SELECT gpumf_linreg_agg(y, x) FROM (VALUES (1.0::float8, ARRAY[1.0::float8]), (2, ARRAY[1, 2])) t(y, x);
SELECT gpumf_linreg_agg(y, x) FROM (VALUES (1.0::float8, ARRAY['Infinity'::float8])) t(y, x);
SELECT gpumf_linreg_agg(y, x, i) FROM (VALUES (1.0::float8, ARRAY[1.0::float8], true), (2, ARRAY[2], false)) t(y, x, i);
SELECT (gpumf_linreg_agg(y, x)).coef FROM (VALUES (1.0::float8, ARRAY[1.0::float8]), (2, ARRAY[1.0])) t(y, x);
\set VERBOSITY default

-- cleanup
SET client_min_messages = warning;
DROP TABLE nothing, poisson_lower, poisson_upper, poisson_both, poisson_dup, poisson0, small, general, m, neg,
  textvals, longley, longley_cert, longley_fit, norris, poly, collinear, holes, grouped, serial_fit,
  serial_all, x_true, rhs CASCADE;
DROP FUNCTION max_error(float8[]), lre(float8, float8), ref_qr(float8[], float8[], int, int),
  poly_design(bool), same(float8[], float8[]);
DROP ROLE regress_gpumf_linalg;
RESET client_min_messages;
