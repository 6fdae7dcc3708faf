/*-------------------------------------------------------------------------
 *
 * outbox_compat.h
 *		Server calls whose name or existence depends on the PostgreSQL
 *		version or minor release, kept in one place.
 *
 * This is the only place that tests PG_VERSION_NUM, and it carries the
 * includes those tests need.  The extension builds for PostgreSQL 15 and
 * later majors (tested on 15 and 18; the 16 and 17 branches follow those
 * releases' documented API).  A module built against one minor release
 * must still load into an older one, so nothing may reference a symbol that
 * only later minor releases export, except weakly (see
 * ObxProxyOptionAllowed): the module needs no minimum minor release.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_COMPAT_H
#define OUTBOX_COMPAT_H

#include <ctype.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tupdesc.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_foreign_server.h"
#include "common/base64.h"
#include "datatype/timestamp.h"
#include "miscadmin.h"
#include "nodes/nodes.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/rel.h"
#if PG_VERSION_NUM >= 160000
#include "varatt.h"				/* VARDATA and the like, no longer in postgres.h */
#endif

/*
 * A function that does not return: written before the declaration, as
 * 18's pg_noreturn is (15 to 17 have pg_attribute_noreturn(), written
 * after it; the compilers that build PostgreSQL accept the attribute in
 * front as well).
 */
#ifdef pg_noreturn
#define ObxNoreturn pg_noreturn
#else
#define ObxNoreturn pg_attribute_noreturn()
#endif

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

/* Whether a role has a privilege on a foreign server */
#if PG_VERSION_NUM >= 160000
#define ObxForeignServerAclcheck(serverid, roleid, mode) \
	object_aclcheck(ForeignServerRelationId, (serverid), (roleid), (mode))
#else
#define ObxForeignServerAclcheck(serverid, roleid, mode) \
	pg_foreign_server_aclcheck((serverid), (roleid), (mode))
#endif

/*
 * Whether a server-side libpq client may pass a connection option on a
 * user's behalf.  libpqsrv_is_valid_proxy_option() came in a minor release
 * (15.20; 18.6 does not have it), so neither the major nor the minor
 * version of the headers says whether the server has it: it is declared
 * here and referenced weakly, whatever the headers say.  A hard reference
 * from a module built against headers that have it would make the module
 * fail to load ("undefined symbol") into a server of an older minor
 * release.  With the weak reference its address is NULL on such a server:
 * then any non-debug libpq option of the server and user mapping passes,
 * as the foreign-data wrappers' own validators already restrict them.
 */
extern bool libpqsrv_is_valid_proxy_option(const char *keyword);
#pragma weak libpqsrv_is_valid_proxy_option

/* May a server-side client pass the libpq option keyword on? */
static inline bool
ObxProxyOptionAllowed(const char *keyword)
{
	if (libpqsrv_is_valid_proxy_option != NULL)
		return libpqsrv_is_valid_proxy_option(keyword);
	return true;
}

/*
 * Whether the token the core scanner returned at loc of text is a
 * parameter ($n).  The grammar's token numbers (PARAM, parser/gramparse.h)
 * are not installed from 16 on; the text says it as well: no other token
 * starts with $ and a digit (dollar-quote tags and identifiers cannot start
 * with a digit).
 */
#define ObxScannedParam(text, loc) \
	((text)[(loc)] == '$' && isdigit((unsigned char) (text)[(loc) + 1]))

/*
 * This backend's slot in ProcGlobal->allProcs: from 17 PGPROC has no
 * pgprocno.  The prepared transactions' PGPROCs follow the backends' and
 * the auxiliary processes' (whose number grows with 18's I/O workers;
 * NUM_AUXILIARY_PROCS of the headers built against counts them).
 */
#if PG_VERSION_NUM >= 170000
#define ObxMyProcNumber		((int) MyProcNumber)
#else
#define ObxMyProcNumber		(MyProc->pgprocno)
#endif
#ifdef FIRST_PREPARED_XACT_PROC_NUMBER
#define ObxFirstPreparedProc	((int) FIRST_PREPARED_XACT_PROC_NUMBER)
#else
#define ObxFirstPreparedProc	(MaxBackends + NUM_AUXILIARY_PROCS)
#endif

/*
 * An index scan without instrumentation: from 18 index_beginscan takes
 * where to count (IndexScanInstrumentation) before the keys.
 */
#if PG_VERSION_NUM >= 180000
#define ObxIndexBeginScan(heap, index, snapshot, nkeys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), 0)
#else
#define ObxIndexBeginScan(heap, index, snapshot, nkeys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), 0)
#endif

/*
 * A wait event set for one wait, freed by the caller (FreeWaitEventSet).
 * Up to 16 it is allocated in cxt; from 17 it is allocated in
 * TopMemoryContext and takes a resource owner instead (none: the caller
 * frees it).
 */
#if PG_VERSION_NUM >= 170000
#define ObxCreateWaitEventSet(cxt, nevents) \
	((void) (cxt), CreateWaitEventSet(NULL, (nevents)))
#else
#define ObxCreateWaitEventSet(cxt, nevents) \
	CreateWaitEventSet((cxt), (nevents))
#endif

/*
 * The expression of a CHECK constraint that an INSERT tests, or NULL for
 * one it does not (NOT ENFORCED, from 18).
 */
static inline Node *
ObxEnforcedCheck(ConstrCheck *check)
{
#if PG_VERSION_NUM >= 180000
	if (!check->ccenforced)
		return NULL;
#endif
	return (Node *) stringToNode(check->ccbin);
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

/*
 * The OID of an installed extension, or InvalidOid, read from pg_extension
 * itself.  From 18 get_extension_oid() answers from the system cache, and a
 * process woken by another transaction's commit callback runs before that
 * transaction has sent its invalidations: a committed DROP EXTENSION could
 * still look installed there.  A scan of the catalog takes a new snapshot,
 * which sees the commit, as get_extension_oid() itself did up to 17.
 */
static inline Oid
ObxExtensionOid(const char *extname)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	Oid			result = InvalidOid;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum(extname));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		result = ((Form_pg_extension) GETSTRUCT(tuple))->oid;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return result;
}

/* Whether an interval is infinite: 17 and later have such intervals. */
#if PG_VERSION_NUM >= 170000
#define ObxIntervalIsInfinite(i)	INTERVAL_NOT_FINITE(i)
#else
#define ObxIntervalIsInfinite(i)	false
#endif

/*
 * base64 of binary data: from 18 the binary side is uint8 (and the result
 * must be used); before, char.
 */
#if PG_VERSION_NUM >= 180000
#define ObxB64Encode(src, len, dst, dstlen) \
	pg_b64_encode((const uint8 *) (src), (len), (dst), (dstlen))
#define ObxB64Decode(src, len, dst, dstlen) \
	pg_b64_decode((src), (len), (uint8 *) (dst), (dstlen))
#else
#define ObxB64Encode(src, len, dst, dstlen) \
	pg_b64_encode((const char *) (src), (len), (dst), (dstlen))
#define ObxB64Decode(src, len, dst, dstlen) \
	pg_b64_decode((src), (len), (char *) (dst), (dstlen))
#endif

/*
 * The memory of a GUC check hook's *extra, which the GUC machinery frees:
 * up to 15 it calls free(), so the hook allocates with malloc(); from 16
 * it frees in its own memory context, and guc_malloc() allocates there.
 * Either returns NULL, having reported at elevel, when memory runs out;
 * ObxGucFree frees what it returned.
 */
#if PG_VERSION_NUM >= 160000
#define ObxGucMalloc(elevel, size)	guc_malloc((elevel), (size))
#define ObxGucFree(ptr)				guc_free(ptr)
#else
#define ObxGucFree(ptr)				free(ptr)
static inline void *
ObxGucMalloc(int elevel, size_t size)
{
	void	   *ptr = malloc(size);

	if (ptr == NULL)
		ereport(elevel,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	return ptr;
}
#endif

#endif							/* OUTBOX_COMPAT_H */
