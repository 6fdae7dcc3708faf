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
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "outbox_identity.h"

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
