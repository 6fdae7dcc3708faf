/*-------------------------------------------------------------------------
 *
 * outbox_remote_command.c
 *		Delivery of one message to a remote route, as a RemoteCall: run the
 *		route's command on the remote server and read how it ended, without
 *		ever blocking.
 *
 * The command runs remotely as one statement in autocommit mode with
 * $1 = the envelope (jsonb) and $2 = the topic (text), sent as typed
 * parameters on a cached connection of the route's server and the
 * delivering role.  Only how it ended matters, so its results are read in
 * single-row mode and each is freed at once: a command that returns a
 * million rows holds one of them at a time.
 *
 * A call is a small state machine: connecting (when no cached connection
 * can carry it), then running (the command sent, its results awaited),
 * until every result is in or the deadline passes.  RemoteCallStart resolves the destination (in a
 * transaction, for the catalogs) and takes the first steps; then each
 * RemoteCallStep goes as far as it can with what the socket has, and
 * RemoteCallSocket says what to wait for next.  The worker waits for many
 * calls at once and needs no transaction while it does
 * (outbox_drain_wait.c); a backend waits for its one call with
 * RemoteCallWait.
 *
 * Delivery never raises an error for a remote, network or configuration
 * problem: the call ends with an outcome and the condition (the remote
 * SQLSTATE, message, detail and hint, with a context naming the server),
 * which the caller records with outbox.fail.  The outcome also says
 * whether the server was unreachable (could not connect, lost the
 * connection, or timed out), which is what pauses a route.  Only
 * interrupts (query cancel, terminate) and local resource exhaustion raise
 * errors, and the connection is never leaked on that path.
 *
 * A command still running at its deadline is not cancelled: libpq 15's
 * PQcancel opens a connection of its own and waits for the server to close
 * it, which blocks for as long as the network lets it (minutes of SYN
 * retries towards an address that drops packets, for ever towards a peer
 * that accepts and never answers), and the worker's loop must never block.
 * The connection is closed instead.  The remote server ends the statement
 * when it notices that its client is gone: at once if it runs with
 * client_connection_check_interval, which remote servers of routes should
 * set; otherwise the statement runs to its end and may still commit, and
 * the message, failed here, is delivered again later (at least once).
 *
 * Glossary:
 *	outcome		how a call ended: delivered (the command committed), failed
 *				(the server said no, or this side refused the call), or
 *				unreachable
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_delivery.h"
#include "outbox_remote_int.h"

/*
 * libpq grows a connection's buffers to its largest message and never
 * shrinks them; a connection that carried a message larger than this is
 * closed when its call ends, so that an idle worker keeps no such buffer.
 */
#define OBX_KEEP_BUFFER_BYTES	(1024 * 1024)

/* where a call is */
typedef enum ObxPhase
{
	OBX_CONNECTING,				/* a connection attempt is under way */
	OBX_RUNNING,				/* the command is sent; results awaited */
	OBX_ENDED					/* the outcome is known */
} ObxPhase;

/* how collecting a command's results went */
typedef enum ObxWaitStatus
{
	OBX_WAIT_DONE,				/* every result is in */
	OBX_WAIT_PENDING,			/* more is to come */
	OBX_WAIT_BROKEN				/* the connection failed */
} ObxWaitStatus;

/* what the results of one command said */
typedef struct ObxResults
{
	bool		ok;				/* the last result was a success */
	OutboxError error;			/* the first failure, if any */
	size_t		largest;		/* bytes of the largest message, either way */
} ObxResults;

/* one message's delivery: see the header comment */
struct RemoteCall
{
	/* what to deliver, where, and by when */
	RemoteDestination dest;
	bool		require_password;
	const char *command;
	const char *envelope;
	const char *topic;
	TimestampTz start;
	TimestampTz deadline;
	bool		prepare_only;	/* a check: prepare the command, run nothing */

	/* how far it has come */
	ObxPhase	phase;
	RemoteCallStage stage;		/* the step it has reached */
	RemoteConn *entry;			/* held until the call ends */
	bool		reused;			/* on a cached connection, not yet proven */
	bool		retried;		/* a second connection was made */
	bool		flushed;		/* the command has left libpq's buffer */
	bool		input_failed;	/* reading the socket failed */
	ObxResults	results;

	/* how it ended */
	RemoteOutcome outcome;
	OutboxError error;
};

static RemoteCall *obx_start(const char *server_name, Oid userid,
							 bool require_password, const char *command,
							 const char *envelope, const char *topic,
							 TimestampTz deadline, bool prepare_only);
static void obx_open(RemoteCall *call);
static void obx_connect(RemoteCall *call);
static void obx_connecting(RemoteCall *call, int ready);
static void obx_send(RemoteCall *call);
static void obx_running(RemoteCall *call, int ready);
static void obx_timed_out(RemoteCall *call);
static void obx_finished(RemoteCall *call, ObxWaitStatus status);
static void obx_broken(RemoteCall *call, bool answered);
static void obx_end(RemoteCall *call, RemoteOutcome outcome);
static ObxWaitStatus obx_collect(RemoteCall *call, int ready);
static bool obx_take_result(PGconn *conn, PGresult *res,
							const char *servername, ObxResults *results);
static size_t obx_result_bytes(const PGresult *res);

/* ---------------------------------------------------------------------
 * The calls
 * ---------------------------------------------------------------------
 */

/*
 * Start running a route's command on the remote server for one message,
 * to end by deadline: resolve the server and the role's user mapping,
 * then send the command on a cached connection or start connecting.  The
 * call may have ended already (a configuration that forbids it, a server
 * that refused at once).  Must be called in a transaction (it reads the
 * catalogs); the strings must live as long as the call, which is
 * allocated in the current memory context.  Raises an error only for
 * local resource exhaustion.
 */
RemoteCall *
RemoteCallStart(const char *server_name, Oid userid, bool require_password,
				const char *command, const char *envelope, const char *topic,
				TimestampTz deadline)
{
	return obx_start(server_name, userid, require_password, command,
					 envelope, topic, deadline, false);
}

/*
 * Start a check of a route's command (outbox.check_route): as a delivery
 * starts, but always on a new connection, and the command is only
 * prepared remotely, as an unnamed statement with the parameter types of a
 * delivery, never run.  An unnamed statement lives until the next one on
 * the connection, so a pooler in transaction mode serves it too.  Wait for
 * it with RemoteCallWait; RemoteCallStageOf says which step it ended in.
 * The connection is closed when the check ends.
 */
RemoteCall *
RemoteProbeStart(const char *server_name, Oid userid, bool require_password,
				 const char *command, TimestampTz deadline)
{
	return obx_start(server_name, userid, require_password, command,
					 NULL, NULL, deadline, true);
}

/* The step the call has reached, or ended in. */
RemoteCallStage
RemoteCallStageOf(RemoteCall *call)
{
	return call->stage;
}

/* RemoteCallStart and RemoteProbeStart */
static RemoteCall *
obx_start(const char *server_name, Oid userid, bool require_password,
		  const char *command, const char *envelope, const char *topic,
		  TimestampTz deadline, bool prepare_only)
{
	RemoteCall *call = palloc0(sizeof(RemoteCall));

	call->prepare_only = prepare_only;
	call->stage = REMOTE_STAGE_SERVER;
	call->require_password = require_password;
	call->command = command;
	call->envelope = envelope;
	call->topic = topic;
	call->start = GetCurrentTimestamp();
	call->deadline = deadline;
	call->outcome = REMOTE_PENDING;
	OutboxErrorClear(&call->error);

	/* Connections to a changed (or dropped) server go first. */
	RemoteCloseInvalidated();

	if (!RemoteResolve(server_name, userid, &call->dest, &call->error))
	{
		obx_end(call, REMOTE_FAILED);
		return call;
	}
	/* the cache entry needs them, and no catalog is at hand after this */
	call->dest.server_hash =
		GetSysCacheHashValue1(FOREIGNSERVEROID,
							  ObjectIdGetDatum(call->dest.serverid));
	call->dest.mapping_hash =
		GetSysCacheHashValue1(USERMAPPINGOID,
							  ObjectIdGetDatum(call->dest.umid));

	call->entry = RemoteConnTake(&call->dest);
	PG_TRY();
	{
		if (call->prepare_only)
			RemoteConnClose(call->entry);	/* a check connects anew */
		obx_open(call);
	}
	PG_CATCH();
	{
		RemoteCallAbandon(call);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return call;
}

/*
 * The socket events the call waits for, and the socket in *sock; 0 when it
 * has ended.  A call whose connection has no socket waits for nothing
 * more: the next RemoteCallStep ends it.
 */
int
RemoteCallSocket(RemoteCall *call, pgsocket *sock)
{
	*sock = PGINVALID_SOCKET;
	if (call->phase == OBX_ENDED)
		return 0;
	*sock = PQsocket(call->entry->conn);
	if (call->phase == OBX_CONNECTING)
		return RemoteConnEvents(call->entry);
	return WL_SOCKET_READABLE | (call->flushed ? 0 : WL_SOCKET_WRITEABLE);
}

/* When the call's wait runs out: its deadline. */
TimestampTz
RemoteCallDeadline(RemoteCall *call)
{
	return call->deadline;
}

/*
 * Take the call as far as it goes without waiting, given the socket events
 * that are ready (none after a timeout).  Needs no transaction.
 */
void
RemoteCallStep(RemoteCall *call, int ready)
{
	switch (call->phase)
	{
		case OBX_CONNECTING:
			obx_connecting(call, ready);
			break;
		case OBX_RUNNING:
			obx_running(call, ready);
			break;
		case OBX_ENDED:
			break;
	}
}

/*
 * Wait for the call to end, on the latch and the call's socket, serving
 * interrupts: the backend's way, one call at a time.  An error (an
 * interrupt) abandons the call, closing its connection, and goes on.
 */
void
RemoteCallWait(RemoteCall *call)
{
	RemoteWaitsBegin();
	PG_TRY();
	{
		while (call->phase != OBX_ENDED)
		{
			pgsocket	sock;
			int			events = RemoteCallSocket(call, &sock);

			RemoteCallStep(call, RemoteWait(call->entry->conn, events,
											RemoteCallDeadline(call)));
		}
	}
	PG_CATCH();
	{
		RemoteCallAbandon(call);
		PG_RE_THROW();
	}
	PG_END_TRY();
	RemoteWaitsEnd();
}

/*
 * How the call ended (REMOTE_PENDING while it runs); *error points to its
 * condition when it did not deliver.
 */
RemoteOutcome
RemoteCallOutcome(RemoteCall *call, const OutboxError **error)
{
	*error = &call->error;
	return call->outcome;
}

/*
 * Give up a call after an error: its connection is closed (see the header
 * comment for what becomes of a command still running).  Safe on a call
 * that has ended.
 */
void
RemoteCallAbandon(RemoteCall *call)
{
	if (call->entry != NULL)
		RemoteConnAbandon(call->entry);
	call->entry = NULL;
	call->phase = OBX_ENDED;
}

/* ---------------------------------------------------------------------
 * The steps of a call
 * ---------------------------------------------------------------------
 */

/*
 * Send the command on the entry's connection when it can carry it, or
 * start a new connection.
 */
static void
obx_open(RemoteCall *call)
{
	RemoteConn *entry = call->entry;

	if (entry->conn != NULL)
	{
		if (RemoteConnUsable(entry, &call->dest, call->require_password))
		{
			call->reused = true;
			obx_send(call);
			return;
		}
		RemoteConnClose(entry);
	}
	obx_connect(call);
}

/* Start a new connection for the call; it may end at once. */
static void
obx_connect(RemoteCall *call)
{
	call->reused = false;
	call->stage = REMOTE_STAGE_CONNECT;
	if (!RemoteConnBegin(call->entry, &call->dest, call->require_password,
						 call->start, call->deadline, &call->error))
	{
		obx_end(call, REMOTE_FAILED);
		return;
	}
	call->phase = OBX_CONNECTING;
	obx_connecting(call, 0);
}

/* A step of connecting; once connected, the command goes. */
static void
obx_connecting(RemoteCall *call, int ready)
{
	switch (RemoteConnContinue(call->entry, &call->dest, call->require_password,
							   ready, call->start, call->deadline,
							   &call->error))
	{
		case REMOTE_CONN_PENDING:
			break;
		case REMOTE_CONN_READY:
			obx_send(call);
			break;
		case REMOTE_CONN_UNREACHABLE:
			obx_end(call, REMOTE_UNREACHABLE);
			break;
		case REMOTE_CONN_REFUSED:
			obx_end(call, REMOTE_FAILED);
			break;
	}
}

/* Send the command with the envelope and topic as typed parameters. */
static void
obx_send(RemoteCall *call)
{
	PGconn	   *conn = call->entry->conn;
	const Oid	types[2] = {JSONBOID, TEXTOID};
	const char *values[2];

	values[0] = call->envelope;
	values[1] = call->topic;
	call->phase = OBX_RUNNING;
	call->stage = REMOTE_STAGE_COMMAND;
	call->flushed = false;
	call->input_failed = false;
	call->results.ok = false;
	OutboxErrorClear(&call->results.error);
	call->results.largest = call->envelope ? strlen(call->envelope) : 0;

	if (GetCurrentTimestamp() >= call->deadline)
	{
		RemoteCommandTimedOut(&call->error, call->dest.servername,
							  RemoteElapsedMs(call->start));
		obx_end(call, REMOTE_UNREACHABLE);
		return;
	}

	if (call->prepare_only ?
		!PQsendPrepare(conn, "", call->command, 2, types) :
		!PQsendQueryParams(conn, call->command, 2, types, values, NULL, NULL, 0))
	{
		RemoteCommandConnectionError(conn, call->dest.servername, &call->error);
		obx_broken(call, false);
		return;
	}
	call->entry->busy = true;
	if (!call->prepare_only && !PQsetSingleRowMode(conn))
		elog(DEBUG1, "could not set single-row mode on the connection to server \"%s\"",
			 call->dest.servername);
	obx_running(call, 0);
}

/*
 * A step of a running command: read what has arrived, and end the call
 * when every result is in or its time is up.
 */
static void
obx_running(RemoteCall *call, int ready)
{
	ObxWaitStatus status = obx_collect(call, ready);

	if (status != OBX_WAIT_PENDING)
		obx_finished(call, status);
	else if (GetCurrentTimestamp() >= RemoteCallDeadline(call))
		obx_timed_out(call);
}

/*
 * The command's deadline has passed: the connection is closed rather than
 * the command cancelled (see the header comment), and the message failed.
 */
static void
obx_timed_out(RemoteCall *call)
{
	call->entry->busy = false;
	RemoteCommandTimedOut(&call->error, call->dest.servername,
						  RemoteElapsedMs(call->start));
	RemoteConnClose(call->entry);
	obx_end(call, REMOTE_UNREACHABLE);
}

/* Every result of the command is in, or the connection broke. */
static void
obx_finished(RemoteCall *call, ObxWaitStatus status)
{
	PGconn	   *conn = call->entry->conn;

	call->entry->busy = false;
	if (status == OBX_WAIT_BROKEN)
	{
		bool		answered = OutboxErrorIsSet(&call->results.error);

		if (answered)
			call->error = call->results.error;
		else
			RemoteCommandConnectionError(conn, call->dest.servername, &call->error);
		obx_broken(call, answered);
		return;
	}
	if (call->results.ok)
	{
		obx_end(call, REMOTE_DELIVERED);
		return;
	}

	if (OutboxErrorIsSet(&call->results.error))
		call->error = call->results.error;
	else
	{
		OutboxErrorSet(&call->error, ERRCODE_PROTOCOL_VIOLATION,
					   "remote command returned no result");
		RemoteCommandContext(&call->error, call->dest.servername);
	}
	if (PQstatus(conn) != CONNECTION_OK ||
		PQtransactionStatus(conn) != PQTRANS_IDLE)
		RemoteConnClose(call->entry);
	obx_end(call, REMOTE_FAILED);
}

/*
 * The connection cannot go on; answered says whether the server answered
 * the command first (it started a COPY, say).  A cached connection that
 * turns out to be dead (the remote server restarted, or closed the idle
 * session) is no reason to fail the message: it is tried once more on a
 * new connection.  The command can only have committed if the connection
 * broke between its commit and its result, and a second delivery is within
 * the at-least-once promise.
 */
static void
obx_broken(RemoteCall *call, bool answered)
{
	RemoteConn *entry = call->entry;

	if (call->reused && !call->retried &&
		PQstatus(entry->conn) == CONNECTION_BAD &&
		GetCurrentTimestamp() < call->deadline)
	{
		RemoteConnClose(entry);
		OutboxErrorClear(&call->error);
		call->retried = true;
		obx_connect(call);
		return;
	}

	RemoteConnClose(entry);
	obx_end(call, answered ? REMOTE_FAILED : REMOTE_UNREACHABLE);
}

/* The call has its outcome: give its connection back to the cache. */
static void
obx_end(RemoteCall *call, RemoteOutcome outcome)
{
	/* every failure path sets the condition; be safe */
	if (outcome != REMOTE_DELIVERED && !OutboxErrorIsSet(&call->error))
		OutboxErrorSet(&call->error, ERRCODE_INTERNAL_ERROR,
					   "remote delivery failed");

	if (call->entry != NULL)
	{
		call->entry->busy = false;
		/* a check keeps no connection open in the session that ran it */
		if (call->results.largest > OBX_KEEP_BUFFER_BYTES || call->prepare_only)
			RemoteConnClose(call->entry);
		RemoteConnRelease(call->entry);
	}
	call->entry = NULL;
	call->phase = OBX_ENDED;
	call->outcome = outcome;
}

/*
 * Read what has arrived for the command, without waiting: flush what is
 * left of it, take in the input when the socket is readable, and note each
 * complete result.  The connection is nonblocking.
 */
static ObxWaitStatus
obx_collect(RemoteCall *call, int ready)
{
	PGconn	   *conn = call->entry->conn;

	if (!call->flushed)
	{
		int			pending = PQflush(conn);

		if (pending < 0)
			return OBX_WAIT_BROKEN;
		call->flushed = (pending == 0);
	}
	if ((ready & WL_SOCKET_READABLE) && !PQconsumeInput(conn))
		call->input_failed = true;	/* collect what libpq made of it first */

	while (!PQisBusy(conn))
	{
		PGresult   *res = PQgetResult(conn);

		if (res == NULL)
			return OBX_WAIT_DONE;
		if (!obx_take_result(conn, res, call->dest.servername, &call->results))
			return OBX_WAIT_BROKEN;
	}

	if (call->input_failed || PQstatus(conn) == CONNECTION_BAD)
		return OBX_WAIT_BROKEN;
	return OBX_WAIT_PENDING;
}

/*
 * Note one result of the command and free it.  Returns false when the
 * connection cannot go on (the command started a COPY).
 */
static bool
obx_take_result(PGconn *conn, PGresult *res, const char *servername,
				ObxResults *results)
{
	volatile bool usable = true;

	PG_TRY();
	{
		results->largest = Max(results->largest, obx_result_bytes(res));
		switch (PQresultStatus(res))
		{
			case PGRES_SINGLE_TUPLE:
				break;			/* a row, read only to be freed */
			case PGRES_COMMAND_OK:
			case PGRES_TUPLES_OK:
				results->ok = !OutboxErrorIsSet(&results->error);
				break;
			case PGRES_COPY_IN:
			case PGRES_COPY_OUT:
			case PGRES_COPY_BOTH:
				results->ok = false;
				if (!OutboxErrorIsSet(&results->error))
				{
					OutboxErrorSet(&results->error, ERRCODE_FEATURE_NOT_SUPPORTED,
								   "remote command started a COPY, which a route cannot serve");
					RemoteCommandContext(&results->error, servername);
				}
				usable = false;
				break;
			default:
				results->ok = false;
				if (!OutboxErrorIsSet(&results->error))
					RemoteCommandError(conn, res, servername, &results->error);
				break;
		}
	}
	PG_FINALLY();
	{
		PQclear(res);
	}
	PG_END_TRY();

	return usable;
}

/*
 * About the bytes a result took in libpq's input buffer: its row's values,
 * or its error message.
 */
static size_t
obx_result_bytes(const PGresult *res)
{
	size_t		bytes = strlen(PQresultErrorMessage(res));
	int			row;
	int			col;

	for (row = 0; row < PQntuples(res); row++)
		for (col = 0; col < PQnfields(res); col++)
			bytes += PQgetlength(res, row, col);
	return bytes;
}
