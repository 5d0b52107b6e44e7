/*
 * gm_errors.h: the error codes every layer below PostgreSQL returns.
 *
 * Shared by src/core (C) and cuda/ (CUDA C++): no other includes, no
 * PostgreSQL.  A function that can fail returns GM_OK or one of these and
 * writes a message into a caller-supplied buffer of GM_ERRLEN bytes; nothing
 * below src/pg longjmps or exits.
 */
#ifndef GM_ERRORS_H
#define GM_ERRORS_H

#define GM_OK			0
#define GM_ENOMEM		1	/* host or device memory exhausted */
#define GM_EINVAL		2	/* invalid arguments or input data */
#define GM_ECANCELED	3	/* the caller asked to stop */
#define GM_EDEVICE		4	/* a CUDA / cuBLAS / cuSPARSE / cuSOLVER call failed */
#define GM_ENODEVICE	5	/* no usable GPU */
#define GM_ENOMODULE	6	/* built without the CUDA module */
#define GM_ENOTSUP		7	/* not available on this backend or for this shape */
#define GM_ERANGE		8	/* a result beyond the range of its type */

#define GM_ERRLEN		512

#endif							/* GM_ERRORS_H */
