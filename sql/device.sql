-- device choice: cpu always works; auto falls back with a NOTICE; gpu without one is an ERROR
SET gpumf.progress = off;
CREATE TABLE d (u int, i int);
INSERT INTO d SELECT u, i FROM generate_series(1, 10) u, generate_series(1, 10) i WHERE (u + i) % 3 = 0;
SET gpumf.device = cpu;
SELECT backend, device LIKE 'cpu (% threads)' AS cpu FROM gpumf_device_info();
SELECT backend, device LIKE 'cpu (% threads)' AS cpu FROM gpumf_train('d', 'u', 'i', factors => 2, iterations => 1);
SET gpumf.threads = 1;
SELECT device FROM gpumf_train('d', 'u', 'i', factors => 2, iterations => 1);
RESET gpumf.threads;
-- the DETAIL names the reason (no module, no driver, no device): left out here
\set VERBOSITY terse
SET gpumf.device = auto;
SELECT backend FROM gpumf_train('d', 'u', 'i', factors => 2, iterations => 1);
-- the fallback NOTICE comes once per session, and never from a CPU-only build
SELECT backend FROM gpumf_train('d', 'u', 'i', factors => 2, iterations => 1);
SET gpumf.device = gpu;
SELECT backend FROM gpumf_train('d', 'u', 'i', factors => 2, iterations => 1);
SELECT backend FROM gpumf.models WHERE name = 'd';
-- without a usable GPU, nothing of CUDA stays loaded in the backend (the probe
-- asks the driver library first, and unloads what a failed probe loaded); with
-- one, the training runs on the training service's worker: nothing of CUDA is
-- loaded in the backend either
SET gpumf.device = auto;
SELECT backend FROM gpumf_train('d', 'u', 'i', factors => 2, iterations => 1);
SELECT backend = 'cuda' AS gpu, position('gpumf_cuda.so' in pg_read_file('/proc/self/maps')) > 0 AS cuda_module_loaded
  FROM gpumf.models WHERE name = 'd';
-- the GPU's compute capability, the architecture of the kernels loaded for it
-- and the fast paths on (NULL on the CPU); a fast path is on exactly where the
-- loaded code has it
SELECT backend,
       (backend = 'cuda') = (compute_capability IS NOT NULL) AS cc_iff_gpu,
       compute_capability::numeric >= 7.5 AS cc_supported,
       kernel_arch::numeric <= compute_capability::numeric AS code_not_newer,
       fast_paths <@ ARRAY['tf32_tensor_cores', 'vector_atomics', 'large_smem'] AS known_paths,
       ('tf32_tensor_cores' = ANY (fast_paths)) = (kernel_arch::numeric >= 8.0) AS tf32_iff_80,
       ('vector_atomics' = ANY (fast_paths)) = (kernel_arch::numeric >= 9.0) AS atomics_iff_90,
       module_archs LIKE '%_%' AS archs_named
  FROM gpumf_device_info();
-- gpumf.gpu_build_rows: a training on the GPU of at least that many rows builds
-- its matrix there (the rows sorted on the GPU; -1: never). The same CSR: the
-- same seen lists, each pair's values summed alike, the same loss within CG's
-- noise; on the CPU both build on the host
CREATE TABLE gb AS SELECT (i * 37) % 97 AS u, (i * 11) % 53 AS i, 1 + i % 4 AS v
  FROM generate_series(1, 3000) i, generate_series(1, 2) twice;
SET gpumf.training_service = off;
SET gpumf.gpu_build_rows = 0;
SELECT nnz, n_users, n_items FROM gpumf_train('gb', 'u', 'i', 'v', factors => 8, iterations => 3, model => 'gb_gpu', autotune => false);
SET gpumf.gpu_build_rows = -1;
SELECT nnz, n_users, n_items FROM gpumf_train('gb', 'u', 'i', 'v', factors => 8, iterations => 3, model => 'gb_host', autotune => false);
RESET gpumf.gpu_build_rows;
RESET gpumf.training_service;
SELECT (SELECT user_table FROM gpumf.models WHERE name = 'gb_gpu') AS gb_gpu_users,
       (SELECT user_table FROM gpumf.models WHERE name = 'gb_host') AS gb_host_users \gset
SELECT count(*) AS users, count(*) FILTER (WHERE g.seen IS DISTINCT FROM h.seen) AS seen_differ
  FROM :gb_gpu_users g FULL JOIN :gb_host_users h USING (key);
SELECT abs(g.final_loss - h.final_loss) <= 1e-4 * abs(h.final_loss) AS same_loss
  FROM gpumf.models g, gpumf.models h WHERE g.name = 'gb_gpu' AND h.name = 'gb_host';
