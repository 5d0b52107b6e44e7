-- gpumf 0.2 -> 0.3.  A new installation runs gpumf--0.1.sql and then the
-- upgrade scripts in turn, so an updated installation and a new one are the same.
\echo Use "ALTER EXTENSION gpumf UPDATE TO '0.3'" to load this file. \quit

-- gpumf_device_info: on a GPU also its compute capability, the architecture
-- the loaded kernels were compiled for, the architecture-specific fast paths
-- on, and what the CUDA module was built for (the same C function, which
-- fills the three columns of 0.2 when called through the old declaration).
DROP FUNCTION gpumf_device_info();
CREATE FUNCTION gpumf_device_info(OUT backend text, OUT device text, OUT detail text,
	OUT compute_capability text, OUT kernel_arch text, OUT fast_paths text[],
	OUT module_archs text)
AS 'MODULE_PATHNAME', 'gpumf_device_info'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION gpumf_device_info IS 'The backend gpumf_train would use under the current gpumf.device, the device name, and why a GPU is not used; on a GPU its compute capability, the architecture its kernels were compiled for (lower when the driver compiled older PTX), the fast paths on (tf32_tensor_cores, vector_atomics, large_smem) and what the CUDA module was built for.';
