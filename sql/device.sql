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
