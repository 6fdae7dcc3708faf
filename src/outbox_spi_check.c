/*-------------------------------------------------------------------------
 *
 * outbox_spi_check.c
 *		obx_saved_statements(): every saved statement of the library
 *		prepared and planned as its runs are, with the scans of its plan;
 *		for the regression tests, which declare the function themselves
 *		(the extension's SQL does not).
 *
 * The statements are listed by SAVED_STATEMENT and SAVED_STATEMENTS
 * (outbox_spi.h) in the section obx_saved_statements, whose bounds the
 * linker names.  Each one is planned in a subtransaction of its own, so
 * that one that fails to prepare is reported with its error and the
 * others are still checked.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "catalog/pg_type.h"
#include "nodes/plannodes.h"
#include "parser/parsetree.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "outbox_spi.h"

PG_FUNCTION_INFO_V1(obx_saved_statements);

#if SAVED_STATEMENT_LISTED
extern const SavedStatementEntry __start_obx_saved_statements[];
extern const SavedStatementEntry __stop_obx_saved_statements[];
#endif

/*
 * The first scanrelid field at or after p: ":scanrelid " up to PostgreSQL
 * 15, ":scan.scanrelid " from 16 on (the plan nodes' output functions are
 * generated, with the fields of a supertype named through it).  Returns
 * where its number starts, or NULL.
 */
static const char *
obx_scanrelid(const char *p)
{
	while ((p = strstr(p, "scanrelid ")) != NULL)
	{
		const char *at = p;

		p += strlen("scanrelid ");
		/* the text starts with "{PLANNEDSTMT ", so at - 6 is within it */
		if (at[-1] == ':' || strncmp(at - 6, ":scan.", 6) == 0)
			return p;
	}
	return NULL;
}

/*
 * Whether the index condition quals (the text after ":indexqual ") has a
 * condition on the index's first column.  In an index condition, the
 * index's columns are the only Vars; what they are compared with are
 * Params.  An index scan has no plan below it, so the first :indexqual
 * after its tag is its own.
 */
static bool
obx_leading_column(const char *quals)
{
	static const char *const next[] = {":indexqualorig ", ":recheckqual ", ":indexorderby "};
	const char *end = NULL;
	const char *v;
	int			i;

	if (strncmp(quals, "<>", 2) == 0)
		return false;
	for (i = 0; i < lengthof(next); i++)
	{
		const char *e = strstr(quals, next[i]);

		if (e != NULL && (end == NULL || e < end))
			end = e;
	}
	v = strstr(quals, ":varattno 1 ");
	return v != NULL && (end == NULL || v < end);
}

/*
 * Add to *names the relations that the nodes tagged tag (as "{SEQSCAN ")
 * of the plan text scan: the first scanrelid after each tag (a bitmap heap
 * scan's is its index scan's, of the same relation), in the range table.
 * With whole, only the index scans that read their index whole: those
 * without a condition on its first column.  The planner makes one the
 * outer side of a join when the statistics of its table say that the
 * table is empty (as after a vacuum of an emptied table), and then every
 * run reads every entry of the index, also the entries of the rows that a
 * held snapshot keeps.
 */
static void
obx_scanned(const char *text, const char *tag, bool whole, List *rtable,
			List **names)
{
	const char *p = text;

	while ((p = strstr(p, tag)) != NULL)
	{
		const char *r = obx_scanrelid(p);
		int			rti;

		p += strlen(tag);
		if (r == NULL)
			break;
		if (whole)
		{
			const char *q = strstr(p, ":indexqual ");

			if (q == NULL)
				break;
			if (obx_leading_column(q + strlen(":indexqual ")))
				continue;
		}
		rti = atoi(r);
		if (rti < 1 || rti > list_length(rtable))
			continue;
		*names = lappend(*names, get_rel_name(rt_fetch(rti, rtable)->relid));
	}
}

/* names as a text[] (empty when none) */
static Datum
obx_names(List *names)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(list_length(names), 1));
	ListCell   *lc;
	int			n = 0;

	foreach(lc, names)
		elems[n++] = CStringGetTextDatum(lfirst(lc) ? (char *) lfirst(lc) : "?");
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}

static const char *
obx_scans_name(SavedStatementScans scans)
{
	switch (scans)
	{
		case OBX_SCANS_INDEX:
			return "index";
		case OBX_SCANS_INDEX_OR_BITMAP:
			return "index or bitmap";
		case OBX_SCANS_ANY:
			return "any";
	}
	return "?";
}

/*
 * The subplans of a plan that read their whole subquery into a hash table,
 * or could have: each hashed one, and each that the planner chose between
 * a correlated and a hashed form (it leaves NULL in the list for the form
 * it set aside).  The choice is by cost alone, and from PostgreSQL 18 on
 * it ignores enable_seqscan = off: on tables whose statistics say they are
 * empty the hashed form wins and reads the whole table at every run.
 */
static int
obx_hashed_subplans(PlannedStmt *ps, const char *text)
{
	const char *p = text;
	ListCell   *lc;
	int			n = 0;

	foreach(lc, ps->subplans)
		if (lfirst(lc) == NULL)
			n++;
	while ((p = strstr(p, ":useHashTable true")) != NULL)
	{
		p++;
		n++;
	}
	return n;
}

/*
 * Plan stmt and put a row for it into rsinfo: its name, the scans it asks
 * for, the relations its plan reads with sequential and with bitmap heap
 * scans, its hashed subplans, the relations it reads with index scans
 * without a condition, and its error (NULL when it planned).
 */
static void
obx_check(ReturnSetInfo *rsinfo, const char *name, SavedStatement *stmt)
{
	MemoryContext caller = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	Datum		values[7];
	bool		nulls[7] = {false, false, false, false, false, false, false};
	int			hashed = 0;
	List	   *seqscans = NIL;
	List	   *fullscans = NIL;
	List	   *bitmapscans = NIL;
	char	   *error = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(caller);
	PG_TRY();
	{
		CachedPlan *cplan;
		ListCell   *lc;

		SpiConnect();
		cplan = SpiCheckPlan(stmt);
		foreach(lc, cplan->stmt_list)
		{
			PlannedStmt *ps = lfirst_node(PlannedStmt, lc);
			char	   *text = nodeToString(ps);
			MemoryContext spi = MemoryContextSwitchTo(caller);

			obx_scanned(text, "{SEQSCAN ", false, ps->rtable, &seqscans);
			obx_scanned(text, "{BITMAPHEAPSCAN ", false, ps->rtable, &bitmapscans);
			hashed += obx_hashed_subplans(ps, text);
			obx_scanned(text, "{INDEXSCAN ", true, ps->rtable, &fullscans);
			obx_scanned(text, "{INDEXONLYSCAN ", true, ps->rtable, &fullscans);
			MemoryContextSwitchTo(spi);
		}
		ReleaseCachedPlan(cplan, NULL);
		SpiFinish();
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(caller);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(caller);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(caller);
		CurrentResourceOwner = owner;
		error = edata->message;
	}
	PG_END_TRY();

	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(obx_scans_name(stmt->scans));
	values[2] = obx_names(seqscans);
	values[3] = obx_names(bitmapscans);
	values[4] = Int32GetDatum(hashed);
	values[5] = obx_names(fullscans);
	if (error != NULL)
		values[6] = CStringGetTextDatum(error);
	else
		nulls[6] = true;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * obx_saved_statements() RETURNS TABLE (statement text, scans text,
 * seq_scans text[], bitmap_scans text[], hashed_subplans integer,
 * error text): superusers only.
 */
Datum
obx_saved_statements(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only a superuser may check the saved statements")));
#if SAVED_STATEMENT_LISTED
	InitMaterializedSRF(fcinfo, 0);
	for (const SavedStatementEntry *e = __start_obx_saved_statements;
		 e < __stop_obx_saved_statements; e++)
	{
		int			i;

		for (i = 0; i < e->count; i++)
		{
			const char *file = strrchr(e->name, '/');
			char	   *name;

			file = file ? file + 1 : e->name;
			name = e->count == 1 ? pstrdup(file) : psprintf("%s[%d]", file, i);

			obx_check(rsinfo, name, &e->stmts[i]);
		}
	}
#else
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("this build of krizaka_outbox does not list its saved statements")));
#endif
	return (Datum) 0;
}
