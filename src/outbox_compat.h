/*-------------------------------------------------------------------------
 *
 * outbox_compat.h
 *		Server calls whose name or existence depends on the PostgreSQL
 *		version or minor release, kept in one place.
 *
 * This is the only place that tests PG_VERSION_NUM, and it carries the
 * includes those tests need.  The extension is built for PostgreSQL 15; a
 * module built against one minor release must still load into an older one,
 * so nothing may reference a symbol that only later minor releases export,
 * except weakly (see ObxProxyOptionAllowed): the module needs no minimum
 * minor release.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_COMPAT_H
#define OUTBOX_COMPAT_H

#include "access/xlog.h"
#include "access/xlog_internal.h"
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

/*
 * Whether a server-side libpq client may pass a connection option on a
 * user's behalf.  libpqsrv_is_valid_proxy_option() came with 15.20
 * (libpq/libpq-be-fe-helpers.h says which options are blessed; the list may
 * change in minor releases).  It is referenced weakly: a hard reference from
 * a module built against 15.20 headers would make the module fail to load
 * ("undefined symbol") into a 15.19 or older server.  With the weak
 * reference its address is NULL on such a server, and the behaviour of a
 * build against older headers applies: any non-debug libpq option of the
 * server and user mapping passes, as the foreign-data wrappers' own
 * validators already restrict them.
 */
#if PG_VERSION_NUM >= 150020
#include "libpq/libpq-be-fe-helpers.h"
#pragma weak libpqsrv_is_valid_proxy_option
#define OBX_HAVE_PROXY_OPTION_CHECK 1
#endif

/* May a server-side client pass the libpq option keyword on? */
static inline bool
ObxProxyOptionAllowed(const char *keyword)
{
#ifdef OBX_HAVE_PROXY_OPTION_CHECK
	if (libpqsrv_is_valid_proxy_option != NULL)
		return libpqsrv_is_valid_proxy_option(keyword);
#endif
	return true;
}

/*
 * The end of the WAL inserted so far, as far as XLogFlush() may be asked to
 * go.  GetXLogInsertRecPtr() gives where the next record would start: when
 * the last record ended exactly at the end of a page, that is past the
 * header of the next page, which is not written yet, and XLogFlush() fails
 * there ("xlog flush request ... is not satisfied").  Every record ends at
 * or before the start of that page.  PostgreSQL 17 has
 * GetXLogInsertEndRecPtr() for this.
 */
#if PG_VERSION_NUM >= 170000
#define ObxXLogInsertEnd()	GetXLogInsertEndRecPtr()
#else
static inline XLogRecPtr
ObxXLogInsertEnd(void)
{
	XLogRecPtr	ptr = GetXLogInsertRecPtr();

	if (XLogSegmentOffset(ptr, wal_segment_size) == SizeOfXLogLongPHD)
		return ptr - SizeOfXLogLongPHD;
	if (ptr % XLOG_BLCKSZ == SizeOfXLogShortPHD)
		return ptr - SizeOfXLogShortPHD;
	return ptr;
}
#endif

#endif							/* OUTBOX_COMPAT_H */
