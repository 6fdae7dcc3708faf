/*-------------------------------------------------------------------------
 *
 * outbox_remote_conn.c
 *		Connections to remote servers: the cache of connections per
 *		(server, delivering role), connecting without blocking, waiting by
 *		a deadline, and closing.
 *
 * The options come from outbox_remote_options.c; nothing about the
 * connection is stored in the outbox's own tables.  Connections are cached for the life of the
 * backend, dropped after a failure, and invalidated when the server or the
 * user mapping changes (only marked by the syscache callback; the next
 * delivery reconnects).  Each connection holds one external FD in fd.c's
 * budget, and carries one call at a time: the worker's calls of different
 * routes to one server each take a connection of their own.
 *
 * Connecting never blocks, but for a host name lookup: libpq resolves a
 * "host" given by name inside PQconnectStartParams, blocking; routes whose
 * server gives "hostaddr" (or a host that is an address) resolve nothing,
 * and outbox.check_route says so.  RemoteConnBegin
 * starts it, RemoteConnContinue takes it a step further each time the
 * socket is ready, until it is made or its deadline passes (PQconnectPoll
 * ignores connect_timeout).  The worker waits for many connections at once
 * (outbox_drain_wait.c); a backend waits for its one through RemoteWait,
 * on the latch, so that query cancel and terminate are served while the
 * remote side hangs.  A wait may consume a latch set meanwhile for another
 * reason; RemoteWaitsEnd sets it again.
 *
 * Glossary:
 *	entry		a RemoteConn: the cache's slot for one (server, role, slot
 *				number), with or without a live connection
 *	deadline	the instant by which a delivery must have returned; it covers
 *				connecting, sending and waiting for the result
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/wait_event.h"

#include "outbox_compat.h"
#include "outbox_remote_int.h"

static MemoryContext ObxRemoteContext = NULL;
static HTAB *ObxConnections = NULL;
static bool obx_latch_consumed = false;

static void obx_cache_init(void);
static bool obx_scan_begin(HASH_SEQ_STATUS *scan);
static RemoteConnProgress obx_connect_established(RemoteConn *entry,
												  RemoteDestination *dest,
												  bool require_password,
												  OutboxError *error);
static void obx_connect_timed_out(OutboxError *error, const char *servername,
								  TimestampTz start);
static void obx_connect_failed(OutboxError *error, const char *servername,
							   PGconn *conn);
static void obx_inval_callback(Datum arg, int cacheid, uint32 hashvalue);
static void obx_notice_receiver(void *arg, const PGresult *res);
static void obx_close_all(int code, Datum arg);

/* ---------------------------------------------------------------------
 * The connection cache
 * ---------------------------------------------------------------------
 */

/*
 * Create the cache on first use, with its memory context, the syscache
 * callbacks that invalidate it and the exit callback that closes it.
 */
static void
obx_cache_init(void)
{
	HASHCTL		ctl;
	HTAB	   *connections;

	if (ObxConnections != NULL)
		return;

	if (ObxRemoteContext == NULL)
		ObxRemoteContext = AllocSetContextCreate(TopMemoryContext,
												 "krizaka_outbox remote connections",
												 ALLOCSET_SMALL_SIZES);
	ctl.keysize = sizeof(RemoteConnKey);
	ctl.entrysize = sizeof(RemoteConn);
	ctl.hcxt = ObxRemoteContext;
	connections = hash_create("krizaka_outbox remote connections", 8, &ctl,
							  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	CacheRegisterSyscacheCallback(FOREIGNSERVEROID, obx_inval_callback,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(USERMAPPINGOID, obx_inval_callback,
								  (Datum) 0);

	/*
	 * A FATAL exit (terminate, postmaster death) leaves by proc_exit, not
	 * through the delivery's PG_CATCH: close the connections there, so that
	 * a command still running remotely sees its client gone.
	 */
	on_proc_exit(obx_close_all, (Datum) 0);

	/* Published last: the callbacks ignore a cache that does not exist. */
	ObxConnections = connections;
}

/*
 * Take a cache entry of the destination's server and role that no other
 * call holds: the first free slot, created if new.  Give it back with
 * RemoteConnRelease.
 */
RemoteConn *
RemoteConnTake(RemoteDestination *dest)
{
	RemoteConnKey key;
	RemoteConn *entry;
	bool		found;

	obx_cache_init();

	MemSet(&key, 0, sizeof(key));
	key.serverid = dest->serverid;
	key.userid = dest->userid;

	/* as many slots as calls in flight: ends at the first free one */
	for (key.slot = 0;; key.slot++)
	{
		entry = hash_search(ObxConnections, &key, HASH_ENTER, &found);
		if (!found)
		{
			entry->conn = NULL;
			entry->umid = InvalidOid;
			entry->server_hash = 0;
			entry->mapping_hash = 0;
			entry->invalidated = false;
			entry->used_password = false;
			entry->in_use = false;
			entry->busy = false;
			namestrcpy(&entry->servername, dest->servername);
		}
		if (!entry->in_use)
			break;
	}
	entry->in_use = true;
	return entry;
}

/* Give back an entry taken by RemoteConnTake, with its connection if any. */
void
RemoteConnRelease(RemoteConn *entry)
{
	entry->in_use = false;
}

/*
 * May the entry's connection carry this delivery?  Not if the server or
 * user mapping changed, if a password is required but the connection was
 * made without one, or if the session is not idle and well.  Reading what
 * arrived while it was idle reveals a session the remote side closed.
 */
bool
RemoteConnUsable(RemoteConn *entry, RemoteDestination *dest,
				 bool require_password)
{
	if (entry->invalidated || entry->umid != dest->umid)
		return false;
	if (require_password && !entry->used_password)
		return false;
	if (!PQconsumeInput(entry->conn))
		return false;
	return PQstatus(entry->conn) == CONNECTION_OK &&
		PQtransactionStatus(entry->conn) == PQTRANS_IDLE;
}

/*
 * Begin a scan of the cache's entries with hash_seq_search; false when no
 * cache exists yet (nothing was ever delivered, or the callbacks run before
 * the cache is published).
 */
static bool
obx_scan_begin(HASH_SEQ_STATUS *scan)
{
	if (ObxConnections == NULL)
		return false;
	hash_seq_init(scan, ObxConnections);
	return true;
}

/*
 * Close the connections whose server or user mapping changed, but for
 * those a call holds: it reconnects when it takes the entry again.
 */
void
RemoteCloseInvalidated(void)
{
	HASH_SEQ_STATUS scan;
	RemoteConn *entry;

	if (!obx_scan_begin(&scan))
		return;
	while ((entry = (RemoteConn *) hash_seq_search(&scan)) != NULL)
	{
		if (entry->conn != NULL && entry->invalidated && !entry->in_use)
			RemoteConnClose(entry);
	}
}

/*
 * Syscache callback for foreign servers and user mappings: mark the
 * connections made with a changed one (all of them on a cache reset).
 * Only marks; the next delivery reconnects.
 */
static void
obx_inval_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	HASH_SEQ_STATUS scan;
	RemoteConn *entry;

	if (!obx_scan_begin(&scan))
		return;
	while ((entry = (RemoteConn *) hash_seq_search(&scan)) != NULL)
	{
		if (entry->conn == NULL)
			continue;
		if (hashvalue == 0 ||
			(cacheid == FOREIGNSERVEROID && entry->server_hash == hashvalue) ||
			(cacheid == USERMAPPINGOID && entry->mapping_hash == hashvalue))
			entry->invalidated = true;
	}
}

/*
 * Notices from the remote session (RAISE NOTICE in a called function, the
 * goodbye of a terminated session) go to the server log at DEBUG1 rather
 * than to stderr.
 */
static void
obx_notice_receiver(void *arg, const PGresult *res)
{
	RemoteConn *entry = (RemoteConn *) arg;
	const char *severity;
	const char *message;

	if (!message_level_is_interesting(DEBUG1))
		return;

	severity = PQresultErrorField(res, PG_DIAG_SEVERITY);
	message = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	ereport(DEBUG1,
			(errmsg_internal("%s from server \"%s\": %s",
							 severity != NULL ? severity : "NOTICE",
							 NameStr(entry->servername),
							 message != NULL ? message : "")));
}

/*
 * proc_exit callback: close every cached connection.  Safe when nothing is
 * cached.
 */
static void
obx_close_all(int code, Datum arg)
{
	HASH_SEQ_STATUS scan;
	RemoteConn *entry;

	if (!obx_scan_begin(&scan))
		return;
	while ((entry = (RemoteConn *) hash_seq_search(&scan)) != NULL)
		RemoteConnAbandon(entry);
}

/* ---------------------------------------------------------------------
 * Connecting and closing
 * ---------------------------------------------------------------------
 */

/*
 * Start connecting the entry to its server; RemoteConnContinue goes on
 * when the socket is ready.  For a non-superuser's route
 * (require_password) the options must carry a password.  Returns false
 * with the condition in *error when no attempt could be started (this
 * side refused it, or has no file descriptor or memory left); the server
 * has not been asked then.
 */
bool
RemoteConnBegin(RemoteConn *entry, RemoteDestination *dest,
				bool require_password, TimestampTz start, TimestampTz deadline,
				OutboxError *error)
{
	PGconn	   *conn;

	if (!RemoteCheckOptions(&dest->options, require_password, error))
	{
		OutboxErrorContext(error, "connection to server \"%s\"",
						   dest->servername);
		return false;
	}
	if (GetCurrentTimestamp() >= deadline)
	{
		obx_connect_timed_out(error, dest->servername, start);
		return false;
	}

	/* A connection is one long-lived file descriptor in fd.c's budget. */
	if (!AcquireExternalFD())
	{
		OutboxErrorSet(error, ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
					   "could not connect to server \"%s\": there are too many open files on the local server",
					   dest->servername);
		OutboxErrorHint(error, "Raise the server's max_files_per_process and/or \"ulimit -n\" limits.");
		return false;
	}
	conn = PQconnectStartParams(dest->options.keywords,
								dest->options.values, false);
	if (conn == NULL)
	{
		ReleaseExternalFD();
		OutboxErrorSet(error, ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
					   "could not connect to server \"%s\": out of memory",
					   dest->servername);
		return false;
	}

	/* From here on RemoteConnClose releases the connection and its FD. */
	entry->conn = conn;
	entry->umid = dest->umid;
	entry->server_hash = dest->server_hash;
	entry->mapping_hash = dest->mapping_hash;
	entry->invalidated = false;
	entry->used_password = false;
	entry->busy = false;
	namestrcpy(&entry->servername, dest->servername);
	PQsetNoticeReceiver(conn, obx_notice_receiver, entry);

	/* Per PQconnectPoll's contract, first wait until the socket is writable. */
	entry->poll = PQstatus(conn) == CONNECTION_BAD ?
		PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
	return true;
}

/* The socket events a connection attempt waits for. */
int
RemoteConnEvents(RemoteConn *entry)
{
	return entry->poll == PGRES_POLLING_READING ?
		WL_SOCKET_READABLE : WL_SOCKET_WRITEABLE;
}

/*
 * Take the entry's connection attempt one step further, given the socket
 * events that are ready (none: only look at the deadline).  A failed or
 * timed-out attempt is closed and its condition set in *error.
 */
RemoteConnProgress
RemoteConnContinue(RemoteConn *entry, RemoteDestination *dest,
				   bool require_password, int ready, TimestampTz start,
				   TimestampTz deadline, OutboxError *error)
{
	/* without a socket libpq has given up; let it say so */
	if (entry->poll != PGRES_POLLING_FAILED &&
		((ready & RemoteConnEvents(entry)) != 0 ||
		 PQsocket(entry->conn) == PGINVALID_SOCKET))
		entry->poll = PQconnectPoll(entry->conn);

	if (entry->poll == PGRES_POLLING_OK)
		return obx_connect_established(entry, dest, require_password, error);
	if (entry->poll == PGRES_POLLING_FAILED)
	{
		obx_connect_failed(error, dest->servername, entry->conn);
		RemoteConnClose(entry);
		return REMOTE_CONN_UNREACHABLE;
	}
	if (GetCurrentTimestamp() >= deadline)
	{
		obx_connect_timed_out(error, dest->servername, start);
		RemoteConnClose(entry);
		return REMOTE_CONN_UNREACHABLE;
	}
	return REMOTE_CONN_PENDING;
}

/*
 * A connection just made: for a non-superuser's route the server must have
 * asked for the password, the rule dblink applies; then it goes
 * nonblocking for the commands.
 */
static RemoteConnProgress
obx_connect_established(RemoteConn *entry, RemoteDestination *dest,
						bool require_password, OutboxError *error)
{
	entry->used_password = PQconnectionUsedPassword(entry->conn);
	if (require_password && !entry->used_password)
	{
		OutboxErrorSet(error, ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED,
					   "password is required");
		OutboxErrorDetail(error, "Non-superuser cannot connect if the server does not request a password.");
		OutboxErrorHint(error, "Target server's authentication method must be changed.");
		OutboxErrorContext(error, "connection to server \"%s\"",
						   dest->servername);
		RemoteConnClose(entry);
		return REMOTE_CONN_REFUSED;
	}

	if (PQsetnonblocking(entry->conn, 1) != 0)
	{
		obx_connect_failed(error, dest->servername, entry->conn);
		RemoteConnClose(entry);
		return REMOTE_CONN_UNREACHABLE;
	}
	return REMOTE_CONN_READY;
}

/* The condition of a connection attempt that ran out of time. */
static void
obx_connect_timed_out(OutboxError *error, const char *servername,
					  TimestampTz start)
{
	OutboxErrorSet(error, ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
				   "connection to server \"%s\" timed out after %ld ms",
				   servername, RemoteElapsedMs(start));
}

/* The condition of a connection attempt that libpq gave up on. */
static void
obx_connect_failed(OutboxError *error, const char *servername, PGconn *conn)
{
	OutboxErrorSet(error, ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
				   "could not connect to server \"%s\": %s",
				   servername, pchomp(PQerrorMessage(conn)));
}

/* Close the entry's connection, if any, and release its FD. */
void
RemoteConnClose(RemoteConn *entry)
{
	if (entry->conn == NULL)
		return;

	PQfinish(entry->conn);
	ReleaseExternalFD();
	entry->conn = NULL;
	entry->busy = false;
	entry->invalidated = false;
	entry->used_password = false;
}

/*
 * Drop a connection left behind by an error, and give the entry back.  A
 * command still running is not cancelled (a cancel request may block; see
 * outbox_remote_command.c): the remote server ends it when it sees the
 * connection gone.
 */
void
RemoteConnAbandon(RemoteConn *entry)
{
	RemoteConnClose(entry);
	RemoteConnRelease(entry);
}

/* ---------------------------------------------------------------------
 * Waiting
 * ---------------------------------------------------------------------
 */

/* Start a delivery's waits: no latch event consumed yet. */
void
RemoteWaitsBegin(void)
{
	obx_latch_consumed = false;
}

/*
 * End a delivery's waits.  They reset our latch; whatever set it meanwhile
 * (a commit waking the worker, say) must still find it set when the
 * delivery returns.
 */
void
RemoteWaitsEnd(void)
{
	if (obx_latch_consumed)
		SetLatch(MyLatch);
	obx_latch_consumed = false;
}

/*
 * Wait until the socket is ready for events, the latch is set or the
 * deadline passes, serving interrupts when the latch is set.  Returns the
 * WL_* events that happened.  PQconnectPoll ignores connect_timeout, so
 * this deadline is the only bound on connecting as well.
 */
int
RemoteWait(PGconn *conn, int events, TimestampTz deadline)
{
	long		timeout;
	int			rc;

	/* Without a socket libpq has given up; let it say so. */
	if (PQsocket(conn) == PGINVALID_SOCKET)
		return events;

	timeout = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
	if (timeout <= 0)
		return WL_TIMEOUT;

	rc = WaitLatchOrSocket(MyLatch,
						   WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH | events,
						   PQsocket(conn), timeout, PG_WAIT_EXTENSION);
	if (rc & WL_LATCH_SET)
	{
		ResetLatch(MyLatch);
		obx_latch_consumed = true;
		CHECK_FOR_INTERRUPTS();
	}
	return rc;
}
