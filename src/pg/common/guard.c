/*
 * guard.c: running gpumf's internal queries safely.
 *
 * The caller's session is hostile ground: its temp schema is searched first
 * for types, and its search_path may put a schema it can write before
 * pg_catalog, where an operator or function of its own would be picked up.
 * Internal queries therefore run under the search_path "pg_catalog, pg_temp"
 * (the temp schema last), and the statements that write the catalog and the
 * factor tables run as the extension's owner in a security-restricted
 * context.  The SQL texts themselves still qualify every type, function and
 * operator with pg_catalog, so they mean the same under any search_path.
 * Those run as the owner also pin extra_float_digits: the kept versions'
 * catalog rows are stored as to_jsonb text (model_history.c), whose floats a
 * caller's extra_float_digits <= 0 would round, and gpumf_use_version would
 * then restore a global mean or value range that the version never had.
 */
#include "gpumf_pg.h"

#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/guc.h"

void
gpumf_guard_enter(GpumfGuard *g, bool as_owner)
{
	GetUserIdAndSecContext(&g->save_user, &g->save_sec);
	g->as_owner = as_owner;
	if (as_owner)
		SetUserIdAndSecContext(gpumf_owner(),
							   g->save_sec | SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_RESTRICTED_OPERATION);
	g->nest = NewGUCNestLevel();
	gm_restrict_search_path();
	/* floats printed exactly (shortest round-trip form), as by default */
	if (as_owner)
		(void) set_config_option("extra_float_digits", "1", PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
}

void
gpumf_guard_exit(GpumfGuard *g)
{
	AtEOXact_GUC(true, g->nest);
	if (g->as_owner)
		SetUserIdAndSecContext(g->save_user, g->save_sec);
}

void
gpumf_spi_exec(const char *sql, int expect)
{
	int			rc = SPI_execute(sql, false, 0);

	if (rc != expect)
		elog(ERROR, "gpumf: internal statement failed (%s): %s",
			 SPI_result_code_string(rc), sql);
}
