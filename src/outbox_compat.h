/*-------------------------------------------------------------------------
 *
 * outbox_compat.h
 *		Server calls whose name or existence depends on the PostgreSQL
 *		version or minor release, kept in one place.
 *
 * The extension is built for PostgreSQL 15; a module built against one minor
 * release must still load into an older one, so nothing here may reference a
 * symbol that only later minor releases export.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_COMPAT_H
#define OUTBOX_COMPAT_H

#include "catalog/pg_database.h"
#include "utils/acl.h"

/*
 * A database left half-dropped by an interrupted DROP DATABASE (15.4 and
 * later mark it with datconnlimit = -2); nobody can connect to it.  Test the
 * field rather than call database_is_invalid_form(), which older 15.x
 * servers do not export.
 */
#ifdef DATCONNLIMIT_INVALID_DB
#define ObxDatabaseIsInvalid(form)	((form)->datconnlimit == DATCONNLIMIT_INVALID_DB)
#else
#define ObxDatabaseIsInvalid(form)	false
#endif

/* Whether a role owns a database (or is a superuser) */
#if PG_VERSION_NUM >= 160000
#define ObxDatabaseOwnercheck(dboid, roleid) \
	object_ownercheck(DatabaseRelationId, (dboid), (roleid))
#else
#define ObxDatabaseOwnercheck(dboid, roleid) \
	pg_database_ownercheck((dboid), (roleid))
#endif

#endif							/* OUTBOX_COMPAT_H */
