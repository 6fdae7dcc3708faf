/*-------------------------------------------------------------------------
 *
 * outbox_identity.h
 *		Using the outbox tables as their owner, and probing their locks
 *		(outbox_identity.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_IDENTITY_H
#define OUTBOX_IDENTITY_H

#include "postgres.h"

#include "fmgr.h"

/* The search_path of the SECURITY DEFINER functions, as pg_proc keeps it */
#define IDENTITY_SEARCH_PATH "pg_catalog, pg_temp"

/* The identity to return to after IdentityBecomeExtensionOwner */
typedef struct SavedIdentity
{
	Oid			userid;
	int			sec_context;
} SavedIdentity;

extern void IdentityBecomeExtensionOwner(SavedIdentity *save);
extern void IdentityBecomeFunctionOwner(FunctionCallInfo fcinfo,
										SavedIdentity *save);
extern void IdentityRestore(const SavedIdentity *save);
extern int	IdentityPinSearchPath(void);
extern void IdentityUnpinSearchPath(int nestlevel);
extern bool IdentityTryLockTables(void);

#endif							/* OUTBOX_IDENTITY_H */
