/*-------------------------------------------------------------------------
 *
 * outbox_remote_int.h
 *		What the files of remote delivery share, and nothing else includes:
 *		the resolved destination of a route, its libpq options, the cached
 *		connections, and waiting on a connection.
 *
 *	outbox_remote_check.c	the checks of a route's command and server, at
 *							route creation (raised) and at each delivery
 *							(kept)
 *	outbox_remote_options.c	libpq options from a server and a user mapping,
 *							and whether they may be used
 *	outbox_remote_conn.c	the connection cache, connecting without
 *							blocking, waiting by a deadline, closing
 *	outbox_remote_command.c	a RemoteCall: the delivery of one message as a
 *							state machine that never blocks, and reading
 *							its outcome
 *	outbox_remote_probe.c	check_route's steps: server, connect, prepare
 *	outbox_remote_errors.c	the conditions a command ends with: timeout,
 *							remote error, lost connection
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_REMOTE_INT_H
#define OUTBOX_REMOTE_INT_H

#include "datatype/timestamp.h"
#include "foreign/foreign.h"
#include "libpq-fe.h"
#include "utils/timestamp.h"

#include "outbox_delivery.h"
#include "outbox_error.h"

/* libpq connection options built from a server and a user mapping */
typedef struct RemoteOptions
{
	const char **keywords;		/* NULL-terminated, for PQconnectStartParams */
	const char **values;
	int			count;
	bool		has_password;	/* a non-empty password is among them */
	const char *unsafe_option;	/* the first one a server may not pass on */
} RemoteOptions;

/*
 * A route's server, resolved for one delivering role: the server, the
 * role's user mapping and the libpq options built from both.  Resolved in
 * a transaction; used after it (the worker connects and waits outside
 * any), so it carries the syscache hash values the cache entry needs.
 */
typedef struct RemoteDestination
{
	Oid			serverid;
	char	   *servername;
	Oid			userid;
	Oid			umid;			/* the role's user mapping, or PUBLIC's */
	uint32		server_hash;	/* syscache hash values of both */
	uint32		mapping_hash;
	RemoteOptions options;
} RemoteDestination;

/*
 * The connection cache: connections per (server, delivering role), each
 * carrying one call at a time.  Calls of different routes to the same
 * server run side by side, so a second call takes slot 1, and so on; a
 * backend that delivers one message at a time only ever uses slot 0.
 */
typedef struct RemoteConnKey
{
	Oid			serverid;
	Oid			userid;
	int			slot;
} RemoteConnKey;

typedef struct RemoteConn
{
	RemoteConnKey key;			/* hash key; must be first */
	PGconn	   *conn;			/* NULL, or a connection holding an external
								 * FD */
	Oid			umid;			/* user mapping it was made with */
	uint32		server_hash;	/* syscache hash values, for invalidation */
	uint32		mapping_hash;
	bool		invalidated;	/* server or mapping changed: reconnect */
	bool		used_password;	/* the remote server asked for the password */
	bool		in_use;			/* taken by a call (RemoteConnTake) */
	bool		busy;			/* a command is in flight */
	PostgresPollingStatusType poll; /* while connecting: PQconnectPoll's last
									 * answer */
	NameData	servername;		/* for notices */
} RemoteConn;

/* how far a connection attempt has come (RemoteConnContinue) */
typedef enum RemoteConnProgress
{
	REMOTE_CONN_PENDING,		/* waiting for the socket (RemoteConnEvents) */
	REMOTE_CONN_READY,			/* connected, nonblocking */
	REMOTE_CONN_UNREACHABLE,	/* the server failed or timed out; closed */
	REMOTE_CONN_REFUSED			/* connected, but refused here; closed */
} RemoteConnProgress;

/* outbox_remote_check.c */
extern bool RemoteResolve(const char *server_name, Oid userid,
						  RemoteDestination *dest, OutboxError *error);

/* outbox_remote_options.c */
extern void RemoteBuildOptions(ForeignServer *server, UserMapping *mapping,
							   RemoteOptions *options);
extern bool RemoteCheckOptions(const RemoteOptions *options,
							   bool require_password, OutboxError *error);

/* outbox_remote_conn.c */
extern RemoteConn *RemoteConnTake(RemoteDestination *dest);
extern void RemoteConnRelease(RemoteConn *entry);
extern bool RemoteConnUsable(RemoteConn *entry, RemoteDestination *dest,
							 bool require_password);
extern bool RemoteConnBegin(RemoteConn *entry, RemoteDestination *dest,
							bool require_password, TimestampTz start,
							TimestampTz deadline, OutboxError *error);
extern int	RemoteConnEvents(RemoteConn *entry);
extern RemoteConnProgress RemoteConnContinue(RemoteConn *entry,
											 RemoteDestination *dest,
											 bool require_password, int ready,
											 TimestampTz start,
											 TimestampTz deadline,
											 OutboxError *error);
extern void RemoteConnClose(RemoteConn *entry);
extern void RemoteConnAbandon(RemoteConn *entry);
extern void RemoteCloseInvalidated(void);
extern void RemoteWaitsBegin(void);
extern void RemoteWaitsEnd(void);
extern int	RemoteWait(PGconn *conn, int events, TimestampTz deadline);

/* the step a remote call has reached (outbox_remote_command.c) */
typedef enum RemoteCallStage
{
	REMOTE_STAGE_SERVER,		/* resolving the server and user mapping */
	REMOTE_STAGE_CONNECT,		/* connecting */
	REMOTE_STAGE_COMMAND		/* sending the command, awaiting its results */
} RemoteCallStage;

extern RemoteCall *RemoteProbeStart(const char *server_name, Oid userid,
									bool require_password, const char *command,
									TimestampTz deadline);
extern RemoteCallStage RemoteCallStageOf(RemoteCall *call);

/* the conditions a remote command ends with (outbox_remote_errors.c) */
extern void RemoteCommandTimedOut(OutboxError *error, const char *servername,
								  long elapsed_ms);
extern void RemoteCommandError(PGconn *conn, const PGresult *res,
							   const char *servername, OutboxError *error);
extern void RemoteCommandConnectionError(PGconn *conn, const char *servername,
										 OutboxError *error);
extern void RemoteCommandContext(OutboxError *error, const char *servername);

/* Milliseconds since start. */
static inline long
RemoteElapsedMs(TimestampTz start)
{
	return TimestampDifferenceMilliseconds(start, GetCurrentTimestamp());
}

#endif							/* OUTBOX_REMOTE_INT_H */
