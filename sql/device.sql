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
