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
 *
 * Reading a relation another role owns on a caller's behalf (fold-in reads
 * a model's source: serving.c) runs as that relation's owner, as
 * PostgreSQL's maintenance commands run index expressions and a
 * materialized view's query: a security-restricted operation (no SET ROLE,
 * no temporary objects, no cursors WITH HOLD) under the same search_path,
 * and every setting the owner's code changes, even with a plain SET, is
 * rolled back on the way out (AtEOXact_GUC(false, ...), as VACUUM and
 * REFRESH MATERIALIZED VIEW do), so that nothing of it stays in the
 * caller's session.
 */
#include "gpumf_pg.h"

#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/guc.h"

/* Enter: as the caller or as the extension's owner (see above). */
void
gpumf_guard_enter(GpumfGuard *g, bool as_owner)
{
	GetUserIdAndSecContext(&g->save_user, &g->save_sec);
	g->as_owner = as_owner;
	g->undo_settings = false;
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

/*
 * Enter as role, a relation's owner whose code may run (see above): a
 * security-restricted operation whose settings are undone at exit.
 */
void
gpumf_guard_enter_as(GpumfGuard *g, Oid role)
{
	GetUserIdAndSecContext(&g->save_user, &g->save_sec);
	g->as_owner = true;			/* a user to restore at exit */
	g->undo_settings = true;
	SetUserIdAndSecContext(role, g->save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	g->nest = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
}

/* Leave: the settings (and the user) as they were on entry. */
void
gpumf_guard_exit(GpumfGuard *g)
{
	AtEOXact_GUC(!g->undo_settings, g->nest);
	if (g->as_owner)
		SetUserIdAndSecContext(g->save_user, g->save_sec);
}

/* Run a statement gpumf built; ERROR unless it returns expect. */
void
gpumf_spi_exec(const char *sql, int expect)
{
	int			rc = SPI_execute(sql, false, 0);

	if (rc != expect)
		elog(ERROR, "gpumf: internal statement failed (%s): %s",
			 SPI_result_code_string(rc), sql);
}
