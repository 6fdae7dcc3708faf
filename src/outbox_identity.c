/*-------------------------------------------------------------------------
 *
 * outbox_identity.c
 *		As whom, and whether now, the outbox tables are used: switching to
 *		the extension owner's identity and back, and taking the tables'
 *		locks without waiting.
 *
 * route_remote acts as its caller for some things (the caller's rights on
 * a foreign server and its user mapping are checked), delivery as the
 * route's creator for the remote connection, and both as the owner of the outbox tables for
 * the tables themselves, which only that owner may write.  The switch is
 * the one of SECURITY DEFINER functions (SECURITY_LOCAL_USERID_CHANGE),
 * and transaction abort undoes it.  Delivery also never waits for the
 * tables: a DROP EXTENSION (or anything else holding a strong lock) makes
 * a round give up instead.
 *
 * outbox.append is the one function declared SECURITY INVOKER that uses
 * the tables: it switches to its owner here, as SECURITY DEFINER would, but
 * without the SET search_path of the other functions, which costs every
 * business transaction a parse of the setting, its restore, and a re-check
 * of the caller's search path by the caller's next statement.  What append
 * runs that could look a name up runs with the search path pinned here
 * (IdentityPinSearchPath): every statement (outbox_spi.c), and the direct
 * insert when the table has code of its own (outbox_store_append.c).
 *
 * Glossary:
 *	extension owner	the owner of the outbox tables, the role that created
 *					the extension
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_proc.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "outbox_identity.h"

/* The owner of the last function IdentityBecomeFunctionOwner looked up */
static Oid	owner_of_function = InvalidOid;
static Oid	owner_of_function_role = InvalidOid;
static bool proc_callback_registered = false;

/* pg_proc changed (an owner may have): look the owner up again. */
static void
obx_forget_function_owner(Datum arg, int cacheid, uint32 hashvalue)
{
	owner_of_function = InvalidOid;
}

/*
 * Run the rest of the call as the owner of the function being called, as
 * SECURITY DEFINER does, keeping the caller's identity in *save for
 * IdentityRestore.  An error restores the identity by itself.
 */
void
IdentityBecomeFunctionOwner(FunctionCallInfo fcinfo, SavedIdentity *save)
{
	Oid			fn = fcinfo->flinfo->fn_oid;

	if (fn != owner_of_function)
	{
		HeapTuple	tup;

		if (!proc_callback_registered)
		{
			CacheRegisterSyscacheCallback(PROCOID, obx_forget_function_owner,
										  (Datum) 0);
			proc_callback_registered = true;
		}
		tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for function %u", fn);
		owner_of_function_role = ((Form_pg_proc) GETSTRUCT(tup))->proowner;
		ReleaseSysCache(tup);
		owner_of_function = fn;
	}
	GetUserIdAndSecContext(&save->userid, &save->sec_context);
	SetUserIdAndSecContext(owner_of_function_role,
						   save->sec_context | SECURITY_LOCAL_USERID_CHANGE);
}

/*
 * Pin search_path to IDENTITY_SEARCH_PATH, the setting of the SECURITY
 * DEFINER functions, unless it is that already.  Returns the GUC nest level
 * to give IdentityUnpinSearchPath, or 0 when nothing was changed.  An error
 * restores the setting by itself (transaction or subtransaction abort).
 */
int
IdentityPinSearchPath(void)
{
	int			nestlevel;

	if (strcmp(namespace_search_path, IDENTITY_SEARCH_PATH) == 0)
		return 0;
	nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", IDENTITY_SEARCH_PATH,
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	return nestlevel;
}

/* Restore the search_path that IdentityPinSearchPath replaced, if it did. */
void
IdentityUnpinSearchPath(int nestlevel)
{
	if (nestlevel > 0)
		AtEOXact_GUC(true, nestlevel);
}

/*
 * Run the following statements as the owner of the outbox tables (the
 * extension's owner), keeping the caller's identity in *save for
 * IdentityRestore.  An error restores the identity by itself: transaction
 * abort resets it.
 */
void
IdentityBecomeExtensionOwner(SavedIdentity *save)
{
	Oid			nsp = get_namespace_oid("outbox", false);
	Oid			relid = get_relname_relid("message", nsp);
	HeapTuple	tup;
	Oid			owner;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"outbox.message\" does not exist")));
	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);

	GetUserIdAndSecContext(&save->userid, &save->sec_context);
	SetUserIdAndSecContext(owner, save->sec_context | SECURITY_LOCAL_USERID_CHANGE);
}

/* Return to the identity saved by IdentityBecomeExtensionOwner. */
void
IdentityRestore(const SavedIdentity *save)
{
	SetUserIdAndSecContext(save->userid, save->sec_context);
}

/*
 * Lock outbox.routes and outbox.message for a round of delivery, without
 * waiting: false when the extension's tables are missing or a concurrent
 * DROP EXTENSION (or anything else taking a strong lock) holds them, so
 * that delivery never blocks such a command.  Needs a transaction.
 */
bool
IdentityTryLockTables(void)
{
	Oid			nsp = get_namespace_oid("outbox", true);
	Oid			routes;
	Oid			message;

	if (!OidIsValid(nsp))
		return false;
	routes = get_relname_relid("routes", nsp);
	message = get_relname_relid("message", nsp);
	if (!OidIsValid(routes) || !OidIsValid(message))
		return false;
	if (!ConditionalLockRelationOid(routes, RowExclusiveLock))
		return false;
	if (!ConditionalLockRelationOid(message, RowExclusiveLock))
		return false;
	return true;
}
