-- implicit ALS in the general form: alpha0, nu, solvers, held-out early
-- stopping, and gpumf_tune
SET gpumf.progress = off;
CREATE TABLE ials_planted AS
SELECT user_id, item_id, value FROM gpumf_synthetic(300, 120, 9000, seed => 7, min_per_user => 5, clusters => 6, affinity => 0.8);

-- Rendle's form with each solver: the parameters are recorded by name
SELECT params, iterations_run, final_loss > 0 AS loss_ok
  FROM gpumf_train('ials_planted', 'user_id', 'item_id', 'value', factors => 8, iterations => 3,
                   model => 'ials_cg', alpha0 => 0.1, nu => 0.5, regularization => 0.001);
SELECT params FROM gpumf_train('ials_planted', 'user_id', 'item_id', factors => 16, iterations => 3,
                   model => 'ials_block', alpha0 => 0.05, solver => 'block', block_size => 8);
SELECT params FROM gpumf_train('ials_planted', 'user_id', 'item_id', factors => 8, iterations => 3,
                   model => 'ials_exact', solver => 'exact', nu => 1, regularization => 0.0001);
SELECT count(*) FROM gpumf_recommend('ials_block', 1, 5);
-- the 2008 model is alpha0 = 1, nu = 0: the same loss as leaving them out
-- (to 1e-6: a GPU sums long rows in no fixed order)
WITH a AS (SELECT final_loss AS l FROM gpumf_train('ials_planted', 'user_id', 'item_id', factors => 8, iterations => 3, model => 'hkv_a')),
     b AS (SELECT final_loss AS l FROM gpumf_train('ials_planted', 'user_id', 'item_id', factors => 8, iterations => 3, model => 'hkv_b',
                                                  alpha0 => 1, nu => 0, solver => 'cg'))
SELECT abs(a.l - b.l) < 1e-6 * a.l AS same_loss FROM a, b;

-- early stopping on held-out rows: the best iteration is kept and recorded
SELECT params->>'holdout' AS holdout, params->>'metric' AS metric,
       iterations_run <= 12 AS stopped_or_ran,
       metrics->'holdout'->>'metric' AS measured,
       (metrics->'holdout'->>'value')::float8 > 0 AS learnt,
       (metrics->'holdout'->>'best_iteration')::int = iterations_run AS best_kept,
       (metrics->'holdout'->>'iterations_trained')::int >= iterations_run AS trained
  FROM gpumf_train('ials_planted', 'user_id', 'item_id', factors => 8, iterations => 12, model => 'ials_ho',
                   solver => 'exact', alpha0 => 0.1, holdout => 0.2, metric => 'ndcg@10');
-- gpumf_evaluate's record => true keeps the training's holdout record beside its own keys
CREATE TABLE ials_eval AS
SELECT user_id, item_id FROM gpumf_synthetic(300, 120, 9000, seed => 8, min_per_user => 5, clusters => 6, affinity => 0.8) WHERE holdout;
SELECT users > 0 AS evaluated FROM gpumf_evaluate('ials_ho', 'ials_eval', 'user_id', 'item_id', k => 5, record => true);
SELECT metrics ? 'holdout' AS holdout_kept, metrics->>'k' AS k, metrics ? 'recall' AS recall_recorded
  FROM gpumf.models WHERE name = 'ials_ho';

-- parameters that do not apply, or are out of range, are named
SELECT gpumf_train('ials_planted', 'user_id', 'item_id', 'value', algorithm => 'ccd', alpha0 => 0.5);
SELECT gpumf_train('ials_planted', 'user_id', 'item_id', nu => 1.5);
SELECT gpumf_train('ials_planted', 'user_id', 'item_id', alpha0 => -1);
SELECT gpumf_train('ials_planted', 'user_id', 'item_id', solver => 'lu');
SELECT gpumf_train('ials_planted', 'user_id', 'item_id', block_size => 8);
SELECT gpumf_train('ials_planted', 'user_id', 'item_id', solver => 'block', cg_steps => 3);
SELECT gpumf_train('ials_planted', 'user_id', 'item_id', solver => 'block', factors => 8, block_size => 9);
SELECT gpumf_train('ials_planted', 'user_id', 'item_id', metric => 'recall@20');
SELECT gpumf_train('ials_planted', 'user_id', 'item_id', holdout => 0.95);
SELECT gpumf_train('ials_planted', 'user_id', 'item_id', holdout => 0.2, metric => 'mrr@10');

-- gpumf_tune on planted data: a row per trial, trial 1 the defaults, and a
-- setting whose held-out metric beats the defaults'
CREATE TABLE ials_planted2 AS
SELECT user_id, item_id, value FROM gpumf_synthetic(600, 300, 15000, seed => 7, min_per_user => 5, clusters => 10, affinity => 0.7);
CREATE TEMP TABLE trials AS
SELECT * FROM gpumf_tune('ials_planted2', 'user_id', 'item_id', 'value', budget => 10, factors => '{8,16}',
                         iterations => 8, seed => 3, model => 'ials_tuned');
SELECT count(*) AS trials, count(*) FILTER (WHERE best) AS best,
       bool_and(metric >= 0 AND metric <= 1 AND seconds >= 0 AND iterations BETWEEN 1 AND 8) AS sane
  FROM trials;
SELECT factors, regularization, alpha0, nu FROM trials WHERE trial = 1;
SELECT (SELECT metric FROM trials WHERE best) > (SELECT metric FROM trials WHERE trial = 1) AS beats_defaults,
       (SELECT metric FROM trials WHERE best) = (SELECT max(metric) FROM trials) AS best_is_max;
-- the best setting, trained on all rows under the given name
SELECT m.factors = t.factors AS same_factors, m.iterations_run = t.iterations AS same_iterations,
       (m.params->>'alpha0')::real = t.alpha0 AS same_alpha0, (m.params->>'nu')::real = t.nu AS same_nu
  FROM gpumf.models m, trials t WHERE m.name = 'ials_tuned' AND t.best;
-- the same search again starts from the same seeded design (the later
-- trials follow the measured metrics, which a GPU may round differently)
SELECT count(*) AS differing FROM trials t
  JOIN gpumf_tune('ials_planted2', 'user_id', 'item_id', 'value', budget => 10, factors => '{8,16}', iterations => 8, seed => 3) u
    ON u.trial = t.trial
 WHERE t.trial <= 2
   AND (u.factors, u.regularization, u.alpha0, u.nu) IS DISTINCT FROM (t.factors, t.regularization, t.alpha0, t.nu);
-- random search (the baseline) and Bayesian optimisation
SELECT count(*) FROM gpumf_tune('ials_planted', 'user_id', 'item_id', budget => 3, factors => '{4}', iterations => 3, method => 'random');
SELECT count(*) FROM gpumf_tune('ials_planted', 'user_id', 'item_id', budget => 4, factors => '{4}', iterations => 3, method => 'bayes');

-- bad arguments are named before anything is read
SELECT * FROM gpumf_tune('ials_planted', 'user_id', 'item_id', budget => 0);
SELECT * FROM gpumf_tune('ials_planted', 'user_id', 'item_id', factors => '{8,4}');
SELECT * FROM gpumf_tune('ials_planted', 'user_id', 'item_id', method => 'grid');
SELECT * FROM gpumf_tune('ials_planted', 'user_id', 'item_id', metric => 'auc');
SELECT * FROM gpumf_tune('ials_planted', 'user_id', 'item_id', nu_range => '{0,2}');
SELECT * FROM gpumf_tune('ials_planted', 'user_id', 'item_id', regularization_range => '{0,1}');
SELECT * FROM gpumf_tune('ials_planted', 'user_id', 'item_id', holdout => 0);
SELECT * FROM gpumf_tune('ials_planted', 'user_id', 'item_id', factors => '{{4,8}}');
SELECT * FROM gpumf_tune('ials_planted', 'user_id', 'item_id', nu_range => '{{0},{1}}');

SELECT gpumf_drop_model(name) FROM gpumf.models WHERE name IN ('ials_cg', 'ials_block', 'ials_exact', 'hkv_a', 'hkv_b', 'ials_ho', 'ials_tuned') ORDER BY name;
DROP TABLE ials_planted, ials_planted2, ials_eval;
