/*-------------------------------------------------------------------------
 *
 * outbox_remote_command.c
 *		Delivery of one message to a remote route: run the route's command
 *		on the remote server and read how it ended.
 *
 * The command runs remotely as one statement in autocommit mode with
 * $1 = the envelope (jsonb) and $2 = the topic (text), sent as typed
 * parameters on the cached connection of the route's server and the
 * delivering role.  Only how it ended matters, so its results are read in
 * single-row mode and each is freed at once: a command that returns a
 * million rows holds one of them at a time.
 *
 * Delivery never raises an error for a remote, network or configuration
 * problem: it returns false and the condition (the remote SQLSTATE,
 * message, detail and hint, with a context naming the server), which the
 * caller records with outbox.fail.  Only interrupts (query cancel,
 * terminate) and local resource exhaustion raise errors, and the
 * connection is never leaked on that path.
 *
 * Glossary:
 *	outcome		how running the command ended: committed, failed on a
 *				connection that stays, or failed with the connection lost
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_delivery.h"
#include "outbox_remote_int.h"

#define OBX_CANCEL_WAIT_MS		250		/* grace for a cancelled command to end */

/*
 * libpq grows a connection's buffers to its largest message and never
 * shrinks them; a connection that carried a message larger than this is
 * closed after the command, so that an idle worker keeps no such buffer.
 */
#define OBX_KEEP_BUFFER_BYTES	(1024 * 1024)

/* how running a command ended */
typedef enum ObxOutcome
{
	OBX_DONE,					/* the remote command committed */
	OBX_FAILED,					/* it failed; the connection is still good */
	OBX_BROKEN					/* it failed; the connection must go */
} ObxOutcome;

/* how waiting for a command's results ended */
typedef enum ObxWaitStatus
{
	OBX_WAIT_DONE,				/* every result is in */
	OBX_WAIT_TIMEOUT,			/* the deadline came first */
	OBX_WAIT_BROKEN				/* the connection failed */
} ObxWaitStatus;

/* what the results of one command said */
typedef struct ObxResults
{
	bool		ok;				/* the last result was a success */
	OutboxError error;			/* the first failure, if any */
	size_t		largest;		/* bytes of the largest row or error */
} ObxResults;

static bool obx_deliver(RemoteDestination *dest, bool require_password,
						const char *command, const char *envelope,
						const char *topic, TimestampTz deadline,
						OutboxError *error);
static bool obx_deliver_on(RemoteConn *entry, RemoteDestination *dest,
						   bool require_password, const char *command,
						   const char *envelope, const char *topic,
						   TimestampTz start, TimestampTz deadline,
						   OutboxError *error);
static ObxOutcome obx_run_command(RemoteConn *entry, const char *servername,
								  const char *command, const char *envelope,
								  const char *topic, TimestampTz start,
								  TimestampTz deadline, OutboxError *error);
static ObxWaitStatus obx_collect(PGconn *conn, const char *servername,
								 TimestampTz deadline, ObxResults *results);
static bool obx_take_result(PGconn *conn, PGresult *res,
							const char *servername, ObxResults *results);
static size_t obx_result_bytes(const PGresult *res);
static char *obx_clip(const char *s);
static void obx_command_timed_out(OutboxError *error, const char *servername,
								  long elapsed_ms);
static void obx_remote_error(PGconn *conn, const PGresult *res,
							 const char *servername, OutboxError *error);
static void obx_connection_error(PGconn *conn, const char *servername,
								 OutboxError *error);
static void obx_libpq_message(OutboxError *error, int sqlerrcode,
							  PGconn *conn, const char *fallback);
static void obx_command_context(OutboxError *error, const char *servername);

/*
 * Run a route's command on the remote server for one message.
 *
 * Returns true when the remote command committed.  Otherwise returns false
 * with the condition in *error.  Raises an error only for interrupts and
 * local resource exhaustion.  Must be called inside a transaction (it reads
 * the catalogs); the remote command commits on its own.
 */
bool
RemoteDeliver(const char *server_name, Oid userid, bool require_password,
			  const char *command, const char *envelope, const char *topic,
			  TimestampTz deadline, OutboxError *error)
{
	RemoteDestination dest;
	bool		ok;

	OutboxErrorClear(error);
	RemoteWaitsBegin();

	/* Connections to a changed (or dropped) server go first. */
	RemoteCloseInvalidated();

	if (!RemoteResolve(server_name, userid, &dest, error))
		ok = false;
	else
		ok = obx_deliver(&dest, require_password, command, envelope, topic,
						 deadline, error);

	/* every failure path sets the condition; be safe */
	if (!ok && !OutboxErrorIsSet(error))
		OutboxErrorSet(error, ERRCODE_INTERNAL_ERROR, "remote delivery failed");

	RemoteWaitsEnd();
	return ok;
}

/*
 * Deliver through the cached connection of the destination, making sure
 * that an error (interrupt, out of memory) leaves no connection or FD
 * behind: the connection is then cancelled, closed and forgotten, and the
 * error goes on.
 */
static bool
obx_deliver(RemoteDestination *dest, bool require_password,
			const char *command, const char *envelope, const char *topic,
			TimestampTz deadline, OutboxError *error)
{
	TimestampTz start = GetCurrentTimestamp();
	RemoteConn *volatile entry = NULL;
	volatile bool ok = false;

	PG_TRY();
	{
		entry = RemoteConnFor(dest);
		ok = obx_deliver_on(entry, dest, require_password, command,
							envelope, topic, start, deadline, error);
	}
	PG_CATCH();
	{
		if (entry != NULL)
			RemoteConnAbandon(entry);
		PG_RE_THROW();
	}
	PG_END_TRY();

	return ok;
}

/*
 * Deliver on the entry's connection, connecting first if there is none or
 * it cannot be reused.
 */
static bool
obx_deliver_on(RemoteConn *entry, RemoteDestination *dest,
			   bool require_password, const char *command,
			   const char *envelope, const char *topic, TimestampTz start,
			   TimestampTz deadline, OutboxError *error)
{
	int			attempt;

	for (attempt = 1;; attempt++)
	{
		bool		reused = false;
		ObxOutcome	outcome;

		if (entry->conn != NULL)
		{
			if (RemoteConnUsable(entry, dest, require_password))
				reused = true;
			else
				RemoteConnClose(entry);
		}
		if (entry->conn == NULL &&
			!RemoteConnOpen(entry, dest, require_password, start, deadline,
							error))
			return false;

		outcome = obx_run_command(entry, dest->servername, command,
								  envelope, topic, start, deadline, error);
		if (outcome != OBX_BROKEN && entry->oversized)
			RemoteConnClose(entry);
		if (outcome == OBX_DONE)
			return true;
		if (outcome == OBX_FAILED)
			return false;

		/*
		 * A cached connection that turns out to be dead (the remote server
		 * restarted, or closed the idle session) is no reason to fail the
		 * message: try once more on a new connection.  The command can only
		 * have committed if the connection broke between its commit and its
		 * result, and a second delivery is within the at-least-once promise.
		 */
		if (reused && attempt == 1 && PQstatus(entry->conn) == CONNECTION_BAD &&
			GetCurrentTimestamp() < deadline)
		{
			RemoteConnClose(entry);
			OutboxErrorClear(error);
			continue;
		}

		RemoteConnClose(entry);
		return false;
	}
}

/*
 * Send the command with the envelope and topic as typed parameters and
 * wait for its results until the deadline.  On timeout, cancel it remotely
 * and give it a short grace to end.
 */
static ObxOutcome
obx_run_command(RemoteConn *entry, const char *servername,
				const char *command, const char *envelope, const char *topic,
				TimestampTz start, TimestampTz deadline, OutboxError *error)
{
	PGconn	   *conn = entry->conn;
	const Oid	types[2] = {JSONBOID, TEXTOID};
	const char *values[2];
	ObxResults	results;
	ObxWaitStatus status;

	values[0] = envelope;
	values[1] = topic;
	results.ok = false;
	OutboxErrorClear(&results.error);
	results.largest = strlen(envelope);

	if (GetCurrentTimestamp() >= deadline)
	{
		obx_command_timed_out(error, servername, RemoteElapsedMs(start));
		return OBX_FAILED;
	}

	if (!PQsendQueryParams(conn, command, 2, types, values, NULL, NULL, 0))
	{
		obx_connection_error(conn, servername, error);
		return OBX_BROKEN;
	}
	entry->busy = true;
	if (!PQsetSingleRowMode(conn))
		elog(DEBUG1, "could not set single-row mode on the connection to server \"%s\"",
			 servername);

	status = obx_collect(conn, servername, deadline, &results);
	if (status == OBX_WAIT_TIMEOUT)
	{
		long		elapsed = RemoteElapsedMs(start);
		TimestampTz grace;

		/*
		 * If the command ends before the cancel reaches it, it has committed
		 * and the message is delivered; otherwise the cancel keeps it from
		 * committing later, unseen.  The connection goes either way.
		 */
		RemoteCancel(conn, servername, true);
		grace = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											OBX_CANCEL_WAIT_MS);
		status = obx_collect(conn, servername, grace, &results);
		entry->busy = false;
		entry->oversized = results.largest > OBX_KEEP_BUFFER_BYTES;
		if (status == OBX_WAIT_DONE && results.ok)
			return OBX_DONE;

		obx_command_timed_out(error, servername, elapsed);
		return OBX_BROKEN;
	}
	entry->busy = false;
	entry->oversized = results.largest > OBX_KEEP_BUFFER_BYTES;

	if (status == OBX_WAIT_BROKEN)
	{
		if (OutboxErrorIsSet(&results.error))
			*error = results.error;
		else
			obx_connection_error(conn, servername, error);
		return OBX_BROKEN;
	}
	if (results.ok)
		return OBX_DONE;

	if (OutboxErrorIsSet(&results.error))
		*error = results.error;
	else
	{
		OutboxErrorSet(error, ERRCODE_PROTOCOL_VIOLATION,
					   "remote command returned no result");
		obx_command_context(error, servername);
	}
	if (PQstatus(conn) == CONNECTION_OK &&
		PQtransactionStatus(conn) == PQTRANS_IDLE)
		return OBX_FAILED;
	return OBX_BROKEN;
}

/*
 * Flush the command and collect its results until libpq has no more, the
 * deadline passes or the connection fails.  The connection is nonblocking:
 * every wait is on the socket and the latch, so interrupts are served.
 */
static ObxWaitStatus
obx_collect(PGconn *conn, const char *servername, TimestampTz deadline,
			ObxResults *results)
{
	bool		flushed = false;
	bool		input_failed = false;

	for (;;)
	{
		int			events = WL_SOCKET_READABLE;
		int			rc;

		if (!flushed)
		{
			int			pending = PQflush(conn);

			if (pending < 0)
				return OBX_WAIT_BROKEN;
			if (pending == 0)
				flushed = true;
			else
				events |= WL_SOCKET_WRITEABLE;
		}

		while (!PQisBusy(conn))
		{
			PGresult   *res = PQgetResult(conn);

			if (res == NULL)
				return OBX_WAIT_DONE;
			if (!obx_take_result(conn, res, servername, results))
				return OBX_WAIT_BROKEN;
		}

		if (input_failed || PQstatus(conn) == CONNECTION_BAD)
			return OBX_WAIT_BROKEN;
		if (GetCurrentTimestamp() >= deadline)
			return OBX_WAIT_TIMEOUT;

		rc = RemoteWait(conn, events, deadline);
		if ((rc & WL_SOCKET_READABLE) && !PQconsumeInput(conn))
			input_failed = true;	/* collect what libpq made of it first */
	}
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
					obx_command_context(&results->error, servername);
				}
				usable = false;
				break;
			default:
				results->ok = false;
				if (!OutboxErrorIsSet(&results->error))
					obx_remote_error(conn, res, servername, &results->error);
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

/* ---------------------------------------------------------------------
 * Conditions of a running command
 * ---------------------------------------------------------------------
 */

/*
 * A copy of a remote text cut to what last_error keeps, on a character
 * boundary (the connection's client_encoding is the database's): a remote
 * error may quote the whole envelope.
 */
static char *
obx_clip(const char *s)
{
	size_t		len = strlen(s);

	if (len > OUTBOX_ERROR_MAX_BYTES)
		len = pg_mbcliplen(s, len, OUTBOX_ERROR_MAX_BYTES);
	return pnstrdup(s, len);
}

/* The condition of a command that ran out of time. */
static void
obx_command_timed_out(OutboxError *error, const char *servername,
					  long elapsed_ms)
{
	OutboxErrorSet(error, ERRCODE_QUERY_CANCELED,
				   "remote command timed out after %ld ms on server \"%s\"",
				   elapsed_ms, servername);
}

/*
 * The condition of a failed remote command: the remote SQLSTATE and
 * primary message, its detail and hint, and a context naming the server
 * (after the remote context, if any).  Without a SQLSTATE the failure was
 * the connection's.  The remote texts are kept as they are.
 */
static void
obx_remote_error(PGconn *conn, const PGresult *res, const char *servername,
				 OutboxError *error)
{
	const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
	const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);
	const char *context = PQresultErrorField(res, PG_DIAG_CONTEXT);
	int			code = ERRCODE_CONNECTION_FAILURE;

	if (sqlstate != NULL && strlen(sqlstate) == 5)
		code = MAKE_SQLSTATE(sqlstate[0], sqlstate[1], sqlstate[2],
							 sqlstate[3], sqlstate[4]);

	if (primary != NULL)
		OutboxErrorSet(error, code, "%s", obx_clip(primary));
	else
		obx_libpq_message(error, code, conn,
						  "could not obtain message string for remote error");
	if (detail != NULL)
		OutboxErrorDetail(error, "%s", obx_clip(detail));
	if (hint != NULL)
		OutboxErrorHint(error, "%s", obx_clip(hint));
	if (context != NULL)
		OutboxErrorContext(error, "%s\nremote command on server \"%s\"",
						   obx_clip(context), servername);
	else
		obx_command_context(error, servername);
}

/* The condition of a connection that failed while a command was under way. */
static void
obx_connection_error(PGconn *conn, const char *servername, OutboxError *error)
{
	obx_libpq_message(error, ERRCODE_CONNECTION_FAILURE, conn,
					  "connection to the remote server failed");
	obx_command_context(error, servername);
}

/*
 * Set the condition to what libpq last said about conn, or to fallback
 * when it said nothing.
 */
static void
obx_libpq_message(OutboxError *error, int sqlerrcode, PGconn *conn,
				  const char *fallback)
{
	char	   *message = pchomp(PQerrorMessage(conn));

	OutboxErrorSet(error, sqlerrcode, "%s",
				   message[0] != '\0' ? message : fallback);
}

/* Name the server whose command met the condition. */
static void
obx_command_context(OutboxError *error, const char *servername)
{
	OutboxErrorContext(error, "remote command on server \"%s\"", servername);
}
