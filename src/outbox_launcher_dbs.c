/*-------------------------------------------------------------------------
 *
 * outbox_launcher_dbs.c
 *		Which databases the launcher serves, and the role its drain workers
 *		connect as.
 *
 * The launcher is connected to no database, so it reads only shared
 * catalogs: pg_database to find the databases that outbox.worker_databases
 * names (or all of them for '*'), pg_authid to resolve outbox.worker_role.
 * Each pass marks the databases it finds wanted in the launcher's table
 * (outbox_launcher.c), which then starts or stops workers to match.
 * worker_status() on a standby reads the same list (LauncherDatabaseNames,
 * LauncherListed, LauncherCanConnect).
 *
 * What is wrong with the setting (a listed database that does not exist or
 * takes no connections, a role that cannot be used) is logged once per
 * configuration: again only after a reload, or once the condition has
 * ended and come back.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "pgstat.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/varlena.h"

#include "outbox.h"
#include "outbox_compat.h"
#include "outbox_launcher_int.h"
#include "outbox_shmem.h"
#include "outbox_worker.h"

static List *obx_logged = NIL;	/* messages logged once per configuration */

static bool obx_log_once(MemoryContext keep_cxt, const char *key);
static void obx_log_again(const char *key);
static void obx_resolve_role(MemoryContext cxt, MemoryContext keep_cxt,
							 Oid *roleid, char **role_problem);

/* After a reload: messages logged once may be logged again. */
void
LauncherForgetLogged(void)
{
	list_free_deep(obx_logged);
	obx_logged = NIL;
}

/*
 * Whether a message (by its key) is logged for the first time; the key is
 * kept in keep_cxt.
 */
static bool
obx_log_once(MemoryContext keep_cxt, const char *key)
{
	ListCell   *lc;
	MemoryContext old;

	foreach(lc, obx_logged)
	{
		if (strcmp((char *) lfirst(lc), key) == 0)
			return false;
	}
	old = MemoryContextSwitchTo(keep_cxt);
	obx_logged = lappend(obx_logged, pstrdup(key));
	MemoryContextSwitchTo(old);
	return true;
}

/* Forget that a message was logged (its condition is over). */
static void
obx_log_again(const char *key)
{
	ListCell   *lc;

	foreach(lc, obx_logged)
	{
		if (strcmp((char *) lfirst(lc), key) == 0)
		{
			pfree(lfirst(lc));
			obx_logged = foreach_delete_current(obx_logged, lc);
			return;
		}
	}
}

/*
 * The database names outbox.worker_databases lists, allocated in the current
 * memory context; *star says whether it is '*' (every database).
 */
List *
LauncherDatabaseNames(bool *star)
{
	char	   *raw = pstrdup(outbox_worker_databases);
	List	   *names = NIL;

	if (!SplitGUCList(raw, ',', &names))
		names = NIL;			/* the check hook let nothing like that in */
	*star = (list_length(names) == 1 && strcmp(linitial(names), "*") == 0);
	return names;
}

/* Whether outbox.worker_databases (names, star) lists database datname. */
bool
LauncherListed(List *names, bool star, const char *datname)
{
	ListCell   *lc;

	if (star)
		return true;
	foreach(lc, names)
	{
		if (strcmp((char *) lfirst(lc), datname) == 0)
			return true;
	}
	return false;
}

/*
 * Whether a worker could connect to a database of pg_database: not a
 * template, accepting connections, not left half-dropped.
 */
bool
LauncherCanConnect(Form_pg_database form)
{
	return !form->datistemplate && form->datallowconn &&
		!ObxDatabaseIsInvalid(form);
}

/*
 * Read pg_database and mark the databases the launcher serves in dbs (its
 * LauncherDbs, entered here for the databases new to it), and resolve the
 * role the workers connect as.  Sets *role_problem (and *roleid invalid)
 * when that role cannot be used.  What is logged once is kept in keep_cxt.
 * Returns whether every database is served ('*').
 */
bool
LauncherScanDatabases(HTAB *dbs, MemoryContext keep_cxt, Oid *roleid,
					  char **role_problem)
{
	MemoryContext cxt = CurrentMemoryContext;
	HASH_SEQ_STATUS seq;
	LauncherDb *db;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	List	   *names;
	List	   *found_names = NIL;
	ListCell   *lc;
	bool		star;

	names = LauncherDatabaseNames(&star);

	hash_seq_init(&seq, dbs);
	while ((db = (LauncherDb *) hash_seq_search(&seq)) != NULL)
		db->wanted = false;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	(void) GetTransactionSnapshot();

	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database form = (Form_pg_database) GETSTRUCT(tup);
		const char *datname = NameStr(form->datname);
		bool		found;

		if (!LauncherListed(names, star, datname))
			continue;

		MemoryContextSwitchTo(cxt);
		if (!star)
			found_names = lappend(found_names, pstrdup(datname));

		if (!LauncherCanConnect(form))
		{
			if (!star && obx_log_once(keep_cxt, psprintf("noconn %s", datname)))
				ereport(LOG,
						(errmsg("krizaka_outbox runs no worker in database \"%s\"",
								datname),
						 errdetail("The database is a template or does not accept connections.")));
			continue;
		}

		db = (LauncherDb *) hash_search(dbs, &form->oid, HASH_ENTER, &found);
		if (!found)
		{
			db->slotno = -1;
			db->handle = NULL;
			db->roleid = InvalidOid;
			db->stopping = false;
			db->no_extension = false;
			db->probe_requested = false;
			db->showing_problem = false;
			db->start_after = 0;
		}
		db->datname = form->datname;
		db->wanted = true;
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);

	obx_resolve_role(cxt, keep_cxt, roleid, role_problem);

	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	pgstat_report_stat(false);

	/* a listed database that does not exist: say so once, look again later */
	foreach(lc, names)
	{
		char	   *name = (char *) lfirst(lc);
		char	   *key = psprintf("missing %s", name);
		ListCell   *fc;
		bool		exists = star;

		foreach(fc, found_names)
			exists |= (strcmp((char *) lfirst(fc), name) == 0);

		if (exists)
			obx_log_again(key);
		else if (obx_log_once(keep_cxt, key))
			ereport(LOG,
					(errmsg("database \"%s\" named in %s does not exist",
							name, "outbox.worker_databases"),
					 errdetail("The krizaka_outbox worker starts once the database is created.")));
	}

	/* keep slot names current after ALTER DATABASE ... RENAME */
	hash_seq_init(&seq, dbs);
	while ((db = (LauncherDb *) hash_seq_search(&seq)) != NULL)
	{
		if (db->slotno >= 0)
			ShmemSetSlotName(db->slotno, &db->datname);
	}

	return star;
}

/*
 * The role the workers connect as: outbox.worker_role, or the bootstrap
 * superuser when it is empty.  A role that does not exist or cannot log in
 * stops all workers; the reason is logged once and shown by worker_status.
 * Runs inside the scan's transaction (pg_authid is a shared catalog); the
 * problem is allocated in cxt, which outlives it.
 */
static void
obx_resolve_role(MemoryContext cxt, MemoryContext keep_cxt, Oid *roleid,
				 char **role_problem)
{
	HeapTuple	tup;
	MemoryContext old;
	const char *format = NULL;	/* of the problem: role name, setting */
	int			sqlerrcode = 0;

	*roleid = InvalidOid;
	*role_problem = NULL;
	if (outbox_worker_role[0] == '\0')
	{
		*roleid = BOOTSTRAP_SUPERUSERID;
		return;
	}

	tup = SearchSysCache1(AUTHNAME, CStringGetDatum(outbox_worker_role));
	if (!HeapTupleIsValid(tup))
	{
		sqlerrcode = ERRCODE_UNDEFINED_OBJECT;
		format = gettext_noop("role \"%s\" named in %s does not exist");
	}
	else
	{
		Form_pg_authid form = (Form_pg_authid) GETSTRUCT(tup);

		if (form->rolcanlogin)
			*roleid = form->oid;
		else
		{
			sqlerrcode = ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION;
			format = gettext_noop("role \"%s\" named in %s is not permitted to log in");
		}
		ReleaseSysCache(tup);
	}
	if (format == NULL)
		return;

	old = MemoryContextSwitchTo(cxt);
	*role_problem = psprintf(format, outbox_worker_role, "outbox.worker_role");
	if (obx_log_once(keep_cxt, *role_problem))
		ereport(WARNING,
				(errcode(sqlerrcode),
				 errmsg(format, outbox_worker_role, "outbox.worker_role"),
				 errdetail("No krizaka_outbox worker runs until the setting is corrected.")));
	MemoryContextSwitchTo(old);
}
