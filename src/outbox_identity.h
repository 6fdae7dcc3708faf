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

/* The identity to return to after IdentityBecomeExtensionOwner */
typedef struct SavedIdentity
{
	Oid			userid;
	int			sec_context;
} SavedIdentity;

extern void IdentityBecomeExtensionOwner(SavedIdentity *save);
extern void IdentityRestore(const SavedIdentity *save);
extern bool IdentityTryLockTables(void);

#endif							/* OUTBOX_IDENTITY_H */
