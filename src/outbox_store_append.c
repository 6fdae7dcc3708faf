/*-------------------------------------------------------------------------
 *
 * outbox_store_append.c
 *		The append of a new message written straight into outbox.message:
 *		its heap tuple and its index entries, without planning or running
 *		a statement.
 *
 * An append is the one write every business transaction pays for, so it
 * should cost what a bare INSERT costs.  Through SPI it also paid for the
 * statement around the row (plan check, executor start and end, opening
 * every index and compiling the predicates of the partial ones) on every
 * call.  Here that work is done once per backend: what the table
 * looks like (its columns, their defaults, its indexes with their
 * predicates compiled) is kept until the relation cache says it changed
 * (or, when those call a function that is not built in, until a function
 * changes),
 * and a call only locks the table, forms the row, and inserts it into the
 * heap and into the indexes whose predicate it meets (two for a message
 * without ordering key or delay: the primary key and the stream).
 *
 * This is the path for a table as the extension makes it.  When the table
 * has anything the executor would have to run around the row (triggers,
 * rules, row security, generated or identity columns, expression,
 * exclusion or non-btree indexes, a NOT NULL column without default that
 * the append does not fill), is a partition (whose partition constraint
 * only the executor checks) or partitioned (whose rows only the executor
 * routes), or is not the table of 1.2, AppendDirect says
 * no and the caller runs the saved INSERT, which does all of it.  The same
 * when this row would fail a NOT NULL or CHECK constraint, or the current
 * role may not insert: nothing has been written yet, and the INSERT then
 * raises PostgreSQL's own error.
 *
 * Whose code runs: append runs as the table's owner but with its caller's
 * search path (outbox_identity.c), and a row written here runs no
 * statement, only the table's defaults, CHECK constraints, index predicates
 * and index support functions.  Those of the table as the extension makes
 * it are constants, tests for NULL and built-in immutable functions, which
 * cannot depend on the search path.  When one of them can (a function that
 * is not built in or not immutable, such as an operator's function in a
 * default or a lookup by name, a domain's CHECK, an index's own operator
 * class), the insert pins the search path, as the INSERT would.  The table
 * is examined under the pinned path too: planning the expressions inlines
 * SQL functions, whose bodies are parsed then.
 *
 * Locks: the table is locked as an INSERT locks it (ROW EXCLUSIVE), and so
 * is each index an entry goes into.  An index the row has no entry in is
 * not opened: it cannot appear or disappear under that table lock
 * (CREATE INDEX takes a conflicting lock; CREATE and DROP INDEX
 * CONCURRENTLY wait for every transaction holding the table), and taking
 * the table lock reads the invalidations that discard what is kept here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/amapi.h"
#include "access/genam.h"
#include "access/transam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_am.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "rewrite/rewriteHandler.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "outbox.h"
#include "outbox_compat.h"
#include "outbox_store.h"
#include "outbox_stream.h"

/*
 * The columns an append fills, in the order of its parameters (APPEND_*),
 * and their types: a column of another type takes the INSERT, which
 * converts or refuses.
 */
static const char *const append_columns[APPEND_NCOLUMNS] = {
	"id", "topic", "event_type", "payload", "created_at", "available_at",
	"deferred", "ordering_key", "seq"
};
static const Oid append_types[APPEND_NCOLUMNS] = {
	UUIDOID, TEXTOID, TEXTOID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	BOOLOID, TEXTOID, INT8OID
};

/* An index of the table: where a new row gets an entry, and how */
typedef struct AppendIndex
{
	Oid			indexoid;
	IndexInfo  *info;
	ExprState  *predicate;		/* NULL for a full index */
} AppendIndex;

/*
 * What is kept of the table between calls, in append_cxt.  direct is false
 * when the table needs the INSERT (see the header comment).
 */
typedef struct AppendTarget
{
	bool		valid;			/* false: look again at the next call */
	bool		direct;
	bool		pin_path;		/* may depend on the search path */
	bool		user_functions; /* calls a function not built in */
	Oid			relid;
	Oid			seqid;
	TupleDesc	tupdesc;
	int			attno[APPEND_NCOLUMNS]; /* 0-based attribute of each column */
	ExprState **defaults;		/* per attribute: its default, or NULL */
	ExprState  *checks;			/* the CHECK constraints, or NULL */
	int			nindexes;
	AppendIndex *indexes;
	TupleTableSlot *slot;
	ExprContext *econtext;
} AppendTarget;

static AppendTarget target;
static MemoryContext append_cxt = NULL;
static bool callbacks_registered = false;

static void obx_forget_relation(Datum arg, Oid relid);
static void obx_forget_functions(Datum arg, int cacheid, uint32 hashvalue);
static bool obx_user_function(Oid func, void *context);
static bool obx_calls_user_function(Node *node, void *context);
static void obx_examine(Relation rel);
static bool obx_examine_columns(Relation rel);
static bool obx_examine_indexes(Relation rel);
static bool obx_row_acceptable(void);
static bool obx_path_dependent_function(Oid func, void *context);
static bool obx_path_dependent(Node *node, void *context);
static Expr *obx_plan_expr(Expr *expr);

/*
 * Whether a function may depend on the search path: any but the server's
 * own immutable functions (an operator's function, a lookup by name, a
 * function that runs a query).
 */
static bool
obx_path_dependent_function(Oid func, void *context)
{
	return OidIsValid(func) &&
		(func >= FirstNormalObjectId || func_volatile(func) != PROVOLATILE_IMMUTABLE);
}

/*
 * Whether evaluating the expression may depend on the search path: through
 * a function, or a domain's constraints (which are not in the tree).
 */
static bool
obx_path_dependent(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, CoerceToDomain) ||
		check_functions_in_node(node, obx_path_dependent_function, NULL))
		return true;
	return expression_tree_walker(node, obx_path_dependent, context);
}

/* Whether a function is not one of the server's own */
static bool
obx_user_function(Oid func, void *context)
{
	return func >= FirstNormalObjectId;
}

/* Whether an expression calls a function that is not the server's own */
static bool
obx_calls_user_function(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (check_functions_in_node(node, obx_user_function, NULL))
		return true;
	return expression_tree_walker(node, obx_calls_user_function, context);
}

/*
 * An expression ready to compile, noting whether it needs the pinned path
 * and whether it calls a function that CREATE OR REPLACE may change (a SQL
 * function's body is inlined by the planning, and the compiled expression
 * keeps each function's lookup).  The tree is looked at before planning
 * too: an inlined function no longer appears after it.
 */
static Expr *
obx_plan_expr(Expr *expr)
{
	Expr	   *planned;

	if (obx_calls_user_function((Node *) expr, NULL))
		target.user_functions = true;
	planned = expression_planner(expr);
	if (obx_calls_user_function((Node *) planned, NULL))
		target.user_functions = true;
	if (obx_path_dependent((Node *) planned, NULL))
		target.pin_path = true;
	return planned;
}

/*
 * The relation cache changed a relation: forget the table if it was this
 * one, one of its indexes or its sequence (or every relation).  Nothing is
 * freed here; the next call starts over.
 */
static void
obx_forget_relation(Datum arg, Oid relid)
{
	int			i;

	if (relid == InvalidOid || relid == target.relid || relid == target.seqid)
	{
		target.valid = false;
		return;
	}
	for (i = 0; i < target.nindexes; i++)
		if (target.indexes[i].indexoid == relid)
			target.valid = false;
}

/*
 * A function was created, replaced, altered or dropped: forget the table
 * if what is kept of it calls a function that is not built in (a default,
 * a CHECK or an index predicate compiled with the function's old body or
 * properties).  The server's own functions are not replaced.
 */
static void
obx_forget_functions(Datum arg, int cacheid, uint32 hashvalue)
{
	if (target.user_functions)
		target.valid = false;
}

/*
 * Look at the table (locked by the caller) and keep what a direct insert
 * needs, or that it cannot be done.
 */
static void
obx_examine(Relation rel)
{
	MemoryContext old;
	Oid			nsp = RelationGetNamespace(rel);
	bool		direct;

	if (!callbacks_registered)
	{
		CacheRegisterRelcacheCallback(obx_forget_relation, (Datum) 0);
		CacheRegisterSyscacheCallback(PROCOID, obx_forget_functions, (Datum) 0);
		callbacks_registered = true;
	}
	if (append_cxt == NULL)
		append_cxt = AllocSetContextCreate(CacheMemoryContext,
										   "krizaka_outbox append",
										   ALLOCSET_SMALL_SIZES);
	MemoryContextReset(append_cxt);
	memset(&target, 0, sizeof(target));
	target.relid = RelationGetRelid(rel);
	target.seqid = get_relname_relid("message_seq", nsp);

	/*
	 * Valid from here on, so that an invalidation read while the indexes
	 * are opened below makes the next call look again.  direct is set
	 * last: after an error on the way the INSERT is used (until the table
	 * changes).
	 */
	target.valid = true;
	old = MemoryContextSwitchTo(append_cxt);
	direct = OidIsValid(target.seqid) &&
		rel->rd_rel->relkind == RELKIND_RELATION &&
		!rel->rd_rel->relispartition &&
		rel->trigdesc == NULL && rel->rd_rules == NULL &&
		!rel->rd_rel->relrowsecurity &&
		obx_examine_columns(rel) && obx_examine_indexes(rel);
	if (direct)
	{
		target.slot = MakeSingleTupleTableSlot(target.tupdesc, &TTSOpsVirtual);
		target.econtext = CreateStandaloneExprContext();
	}
	MemoryContextSwitchTo(old);
	target.direct = direct;
}

/*
 * The columns: the append's own nine, each found once; every other column
 * takes its default (compiled here) or is NULL; and the CHECK constraints.
 */
static bool
obx_examine_columns(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	TupleConstr *constr = desc->constr;
	List	   *checks = NIL;
	int			i;
	int			c;

	target.tupdesc = CreateTupleDescCopy(desc);
	target.defaults = palloc0(sizeof(ExprState *) * desc->natts);
	for (c = 0; c < APPEND_NCOLUMNS; c++)
		target.attno[c] = -1;

	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		Node	   *def;

		if (att->attisdropped)
			continue;
		if (att->attgenerated || att->attidentity)
			return false;
		for (c = 0; c < APPEND_NCOLUMNS; c++)
			if (strcmp(NameStr(att->attname), append_columns[c]) == 0)
				break;
		if (c < APPEND_NCOLUMNS)
		{
			if (att->atttypid != append_types[c] || target.attno[c] >= 0)
				return false;
			target.attno[c] = i;
			continue;
		}

		/* a column without default and of a domain gets the domain's NULL */
		def = build_column_default(rel, i + 1);
		if (def != NULL)
			target.defaults[i] = ExecInitExpr(obx_plan_expr((Expr *) def), NULL);
		else if (att->attnotnull || get_typtype(att->atttypid) == TYPTYPE_DOMAIN)
			return false;
	}
	for (c = 0; c < APPEND_NCOLUMNS; c++)
		if (target.attno[c] < 0)
			return false;

	for (i = 0; constr != NULL && i < constr->num_check; i++)
	{
		Node	   *check = ObxEnforcedCheck(&constr->check[i]);

		checks = list_concat(checks, make_ands_implicit((Expr *) check));
	}
	if (checks != NIL)
		target.checks = ExecInitCheck((List *) obx_plan_expr((Expr *) checks),
									  NULL);
	return true;
}

/*
 * The indexes: all btree, on plain columns, without exclusion constraints
 * or deferred uniqueness; their predicates compiled.  An index not yet
 * ready for inserts (CREATE INDEX CONCURRENTLY) gets no entry, as in the
 * executor; it becomes ready by an invalidation.
 */
static bool
obx_examine_indexes(Relation rel)
{
	List	   *oids = RelationGetIndexList(rel);
	ListCell   *lc;

	target.indexes = palloc0(sizeof(AppendIndex) * Max(list_length(oids), 1));
	foreach(lc, oids)
	{
		Oid			indexoid = lfirst_oid(lc);
		Relation	index = index_open(indexoid, RowExclusiveLock);
		IndexInfo  *info = BuildIndexInfo(index);
		bool		usable = index->rd_rel->relam == BTREE_AM_OID &&
			index->rd_index->indimmediate &&
			info->ii_Expressions == NIL && info->ii_ExclusionOps == NULL;
		int			k;
		int			proc;

		/* the comparison (and other support) functions of its keys */
		for (k = 1; usable && k <= IndexRelationGetNumberOfKeyAttributes(index); k++)
			for (proc = 1; proc <= index->rd_indam->amsupport; proc++)
				if (obx_path_dependent_function(index_getprocid(index, k, proc), NULL))
					target.pin_path = true;
		index_close(index, NoLock);
		if (!usable)
			return false;
		if (!info->ii_ReadyForInserts)
			continue;
		target.indexes[target.nindexes].indexoid = indexoid;
		target.indexes[target.nindexes].info = info;
		if (info->ii_Predicate != NIL)
			target.indexes[target.nindexes].predicate =
				ExecInitQual((List *) obx_plan_expr((Expr *) info->ii_Predicate),
							 NULL);
		target.nindexes++;
	}
	return true;
}

/*
 * Whether the row in the slot meets the NOT NULL and CHECK constraints, as
 * ExecConstraints tests them (a CHECK that is NULL passes).
 */
static bool
obx_row_acceptable(void)
{
	TupleTableSlot *slot = target.slot;
	int			i;

	for (i = 0; i < target.tupdesc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(target.tupdesc, i);

		if (att->attnotnull && !att->attisdropped && slot->tts_isnull[i])
			return false;
	}
	if (target.checks == NULL)
		return true;
	target.econtext->ecxt_scantuple = slot;
	return ExecCheck(target.checks, target.econtext);
}

/*
 * Insert the message whose columns are args/nulls (APPEND_NCOLUMNS of them,
 * the parameters of the append's INSERT; a NULL seq takes the next value of
 * the sequence).  Returns false, having written nothing, when the INSERT
 * must do it instead.
 */
bool
AppendDirect(const Datum *args, const char *nulls)
{
	Oid			relid;
	Relation	rel;
	TupleTableSlot *slot;
	ExprContext *econtext;
	int			pinned;
	int			i;

	/* a transaction that may not write gets the INSERT's error */
	if (XactReadOnly || IsInParallelMode())
		return false;
	/* by name, as outbox_stream.c keeps it (a schema renamed finds another) */
	relid = StreamMessageRelid();
	if (!OidIsValid(relid))
		return false;

	/* the lock reads the invalidations: target may be stale after it */
	rel = table_open(relid, RowExclusiveLock);
	if (!target.valid || target.relid != relid)
	{
		pinned = IdentityPinSearchPath();
		obx_examine(rel);
		IdentityUnpinSearchPath(pinned);
	}
	if (!target.direct ||
		pg_class_aclcheck(relid, GetUserId(), ACL_INSERT) != ACLCHECK_OK)
	{
		table_close(rel, NoLock);
		return false;
	}

	pinned = target.pin_path ? IdentityPinSearchPath() : 0;
	slot = target.slot;
	econtext = target.econtext;
	ExecClearTuple(slot);
	for (i = 0; i < target.tupdesc->natts; i++)
	{
		slot->tts_isnull[i] = true;
		if (target.defaults[i] != NULL)
			slot->tts_values[i] =
				ExecEvalExprSwitchContext(target.defaults[i], econtext,
										  &slot->tts_isnull[i]);
	}
	for (i = 0; i < APPEND_NCOLUMNS; i++)
	{
		int			att = target.attno[i];

		slot->tts_values[att] = args[i];
		slot->tts_isnull[att] = nulls[i] == 'n';
	}
	if (slot->tts_isnull[target.attno[APPEND_COLUMN_SEQ]])
	{
		slot->tts_values[target.attno[APPEND_COLUMN_SEQ]] =
			Int64GetDatum(nextval_internal(target.seqid, true));
		slot->tts_isnull[target.attno[APPEND_COLUMN_SEQ]] = false;
	}
	ExecStoreVirtualTuple(slot);

	if (!obx_row_acceptable())
	{
		ExecClearTuple(slot);
		ResetExprContext(econtext);
		IdentityUnpinSearchPath(pinned);
		table_close(rel, NoLock);
		return false;
	}

	table_tuple_insert(rel, slot, GetCurrentCommandId(true), 0, NULL);

	econtext->ecxt_scantuple = slot;
	for (i = 0; i < target.nindexes; i++)
	{
		AppendIndex *ix = &target.indexes[i];
		Relation	index;
		Datum		values[INDEX_MAX_KEYS];
		bool		isnull[INDEX_MAX_KEYS];

		if (ix->predicate != NULL && !ExecQual(ix->predicate, econtext))
			continue;
		index = index_open(ix->indexoid, RowExclusiveLock);
		FormIndexDatum(ix->info, slot, NULL, values, isnull);
		index_insert(index, values, isnull, &slot->tts_tid, rel,
					 ix->info->ii_Unique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO,
					 false, ix->info);
		index_close(index, NoLock);
	}

	ExecClearTuple(slot);
	ResetExprContext(econtext);
	IdentityUnpinSearchPath(pinned);
	table_close(rel, NoLock);

	/* as after the INSERT: what follows in this transaction sees the row */
	CommandCounterIncrement();
	return true;
}
