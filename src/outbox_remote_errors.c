/*-------------------------------------------------------------------------
 *
 * outbox_remote_errors.c
 *		The conditions a remote command can end with, as OutboxErrors: its
 *		timeout, the remote server's error, and a connection lost while it
 *		ran (outbox_remote_command.c runs the command).
 *
 * Remote texts are kept as the server sent them, each cut on a character
 * boundary to what last_error keeps, and every condition names the server
 * in its context.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mb/pg_wchar.h"

#include "outbox.h"
#include "outbox_remote_int.h"

static char *obx_clip(const char *s);
static void obx_libpq_message(OutboxError *error, int sqlerrcode,
							  PGconn *conn, const char *fallback);

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
void
RemoteCommandTimedOut(OutboxError *error, const char *servername,
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
 * the connection's.  The remote texts are kept as they are, up to what
 * last_error keeps of each.
 */
void
RemoteCommandError(PGconn *conn, const PGresult *res, const char *servername,
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
		RemoteCommandContext(error, servername);
}

/* The condition of a connection that failed while a command was under way. */
void
RemoteCommandConnectionError(PGconn *conn, const char *servername, OutboxError *error)
{
	obx_libpq_message(error, ERRCODE_CONNECTION_FAILURE, conn,
					  "connection to the remote server failed");
	RemoteCommandContext(error, servername);
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
void
RemoteCommandContext(OutboxError *error, const char *servername)
{
	OutboxErrorContext(error, "remote command on server \"%s\"", servername);
}
