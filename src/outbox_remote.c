/*-------------------------------------------------------------------------
 *
 * outbox_remote.c
 *		Delivery to a remote PostgreSQL database through libpq: the checks
 *		made when a remote route is created, and running a route's command
 *		for one message.
 *
 * A remote route names a foreign server (of dblink_fdw or postgres_fdw) and
 * a command.  The server gives the connection options, the user mapping of
 * the delivering role gives the credentials; nothing about the connection
 * is stored in the outbox's own tables.  The command runs remotely as one
 * statement in autocommit mode with $1 = the envelope (jsonb) and $2 = the
 * topic (text), sent as typed parameters.
 *
 * Delivery never raises an error for a remote, network or configuration
 * problem: it returns false and a text "<SQLSTATE>: <message>" with
 * DETAIL/HINT/CONTEXT lines, which the caller records with outbox.fail.
 * Only interrupts (query cancel, terminate) and local resource exhaustion
 * raise errors, and the connection is never leaked on that path.
 *
 * Connections are cached per (server, role) for the life of the backend,
 * dropped after a failure, and invalidated when the server or the user
 * mapping changes (only marked by the syscache callback; the next delivery
 * reconnects).  All waiting goes through the latch with our own deadline,
 * so query cancel and terminate are served while the remote side hangs.
 *
 * Glossary:
 *	target		the resolved route destination: server, user mapping and
 *				the libpq options built from both
 *	deadline	the instant by which a delivery must have returned; it covers
 *				connecting, sending and waiting for the result
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "common/keywords.h"
#include "foreign/foreign.h"
#include "libpq-fe.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "parser/gramparse.h"
#include "parser/parser.h"
#include "parser/scanner.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "outbox.h"
#include "outbox_compat.h"

#define OBX_APPLICATION_NAME	"krizaka_outbox"
#define OBX_CANCEL_WAIT_MS		250		/* grace for a cancelled command to end */

/* libpq connection options built from a server and a user mapping */
typedef struct ObxConnOptions
{
	const char **keywords;		/* NULL-terminated, for PQconnectStartParams */
	const char **values;
	int			count;
	bool		has_password;	/* a non-empty password is among them */
	const char *unsafe_option;	/* the first one a server may not pass on */
} ObxConnOptions;

/* a route's destination, resolved for one delivering role */
typedef struct ObxTarget
{
	Oid			serverid;
	char	   *servername;
	Oid			userid;
	Oid			umid;			/* the role's user mapping, or PUBLIC's */
	ObxConnOptions options;
} ObxTarget;

/* the connection cache: one connection per (server, delivering role) */
typedef struct ObxConnKey
{
	Oid			serverid;
	Oid			userid;
} ObxConnKey;

typedef struct ObxConnEntry
{
	ObxConnKey	key;			/* hash key; must be first */
	PGconn	   *conn;			/* NULL, or a connection holding an external
								 * FD */
	Oid			umid;			/* user mapping it was made with */
	uint32		server_hash;	/* syscache hash values, for invalidation */
	uint32		mapping_hash;
	bool		invalidated;	/* server or mapping changed: reconnect */
	bool		used_password;	/* the remote server asked for the password */
	bool		busy;			/* a command is in flight */
	NameData	servername;		/* for notices */
} ObxConnEntry;

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
	char	   *error;			/* the first failure, formatted */
} ObxResults;

static MemoryContext ObxRemoteContext = NULL;
static HTAB *ObxConnections = NULL;
static PQconninfoOption *ObxLibpqOptions = NULL;	/* from PQconndefaults */
static bool obx_latch_consumed = false;

/* route checks */
static List *obx_parse_command(const char *command);
static void obx_scan_params(const char *command, int *bad_param,
							bool *uses_first);
static bool obx_statement_accepted(Node *stmt);
static bool obx_wrapper_accepted(ForeignServer *server, char **wrapper);
static bool obx_mapping_exists(Oid userid, Oid serverid);
static char *obx_role_name(Oid roleid);

/* connection options */
static bool obx_is_libpq_option(const char *keyword);
static void obx_add_option(ObxConnOptions *options, const char *keyword,
						   const char *value);
static void obx_build_options(ForeignServer *server, UserMapping *mapping,
							  ObxConnOptions *options);
static void obx_check_options(const ObxConnOptions *options);
static bool obx_resolve_target(const char *server_name, Oid userid,
							   ObxTarget *target, char **error);

/* delivery */
static bool obx_deliver(ObxTarget *target, bool require_password,
						const char *command, const char *envelope,
						const char *topic, TimestampTz deadline,
						char **error);
static bool obx_deliver_on(ObxConnEntry *entry, ObxTarget *target,
						   bool require_password, const char *command,
						   const char *envelope, const char *topic,
						   TimestampTz start, TimestampTz deadline,
						   char **error);
static ObxOutcome obx_run_command(ObxConnEntry *entry, const char *servername,
								  const char *command, const char *envelope,
								  const char *topic, TimestampTz start,
								  TimestampTz deadline, char **error);
static ObxWaitStatus obx_collect(PGconn *conn, const char *servername,
								 TimestampTz deadline, ObxResults *results);
static bool obx_take_result(PGconn *conn, PGresult *res,
							const char *servername, ObxResults *results);
static int	obx_wait(PGconn *conn, int events, TimestampTz deadline);
static void obx_send_cancel(PGconn *conn, const char *servername, bool report);
static long obx_elapsed_ms(TimestampTz start);

/* errors */
static char *obx_remote_error(PGconn *conn, const PGresult *res,
							  const char *servername);
static char *obx_connection_error(PGconn *conn, const char *servername);
static void obx_make_text_safe(char *str);

/* the connection cache */
static void obx_cache_init(void);
static ObxConnEntry *obx_entry_for(ObxTarget *target);
static bool obx_entry_usable(ObxConnEntry *entry, ObxTarget *target,
							 bool require_password);
static bool obx_connect(ObxConnEntry *entry, ObxTarget *target,
						bool require_password, TimestampTz start,
						TimestampTz deadline, char **error);
static void obx_disconnect(ObxConnEntry *entry);
static void obx_abandon(ObxConnEntry *entry);
static void obx_close_invalidated(void);
static void obx_inval_callback(Datum arg, int cacheid, uint32 hashvalue);
static void obx_notice_receiver(void *arg, const PGresult *res);
static void obx_at_exit(int code, Datum arg);

/* ---------------------------------------------------------------------
 * Route checks
 * ---------------------------------------------------------------------
 */

/*
 * Check that a route's command is one SQL statement that can take
 * parameters, uses $1 and no parameter above $2.  Raises 22023 otherwise.
 */
void
RemoteCheckCommand(const char *command)
{
	List	   *stmts;
	RawStmt    *raw;
	int			bad_param;
	bool		uses_first;
	const char *kind;

	stmts = obx_parse_command(command);

	if (list_length(stmts) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("remote command must be exactly one SQL statement"),
				 errdetail_plural("The command contains %d statement.",
								  "The command contains %d statements.",
								  list_length(stmts),
								  list_length(stmts))));

	raw = linitial_node(RawStmt, stmts);
	if (!obx_statement_accepted(raw->stmt))
	{
		kind = IsA(raw->stmt, SelectStmt) ? "SELECT INTO" :
			CreateCommandName(raw->stmt);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("remote command cannot be %s %s statement",
						strchr("AEIOU", kind[0]) ? "an" : "a", kind),
				 errdetail("A remote command must be one INSERT, UPDATE, DELETE, MERGE, SELECT or CALL statement.")));
	}

	obx_scan_params(command, &bad_param, &uses_first);
	if (bad_param >= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("remote command uses parameter $%d", bad_param),
				 errdetail("Only $1 (the envelope, jsonb) and $2 (the topic, text) are passed.")));
	if (!uses_first)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("remote command must use $1"),
				 errdetail("$1 is the envelope of the message; a command without it would deliver nothing.")));
}

/*
 * Parse the command with the raw parser, turning a syntax error into 22023.
 *
 * The parser runs in an internal subtransaction so that whatever state a
 * failed parse leaves behind is cleaned up before the error is reported.
 */
static List *
obx_parse_command(const char *command)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	List	   *volatile stmts = NIL;
	ErrorData  *volatile edata = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);

	PG_TRY();
	{
		stmts = raw_parser(command, RAW_PARSE_DEFAULT);

		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();

		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_END_TRY();

	if (edata != NULL)
	{
		/* Only what the parser says about the text becomes 22023. */
		if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION &&
			ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_DATA_EXCEPTION)
			ReThrowError(edata);

		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("remote command is not valid SQL"),
				 errdetail_internal("%s", edata->message)));
	}

	return stmts;
}

/*
 * Find the highest parameter number the command uses and whether it uses
 * $1, by running the core scanner over it.  Parameters inside string
 * literals or quoted identifiers are not parameters and are not seen.
 * The text has already been parsed, so the scanner cannot fail.
 */
static void
obx_scan_params(const char *command, int *bad_param, bool *uses_first)
{
	core_yyscan_t scanner;
	core_yy_extra_type yyextra;
	core_YYSTYPE yylval;
	YYLTYPE		yylloc;
	int			token;

	*bad_param = -1;
	*uses_first = false;

	scanner = scanner_init(command, &yyextra, &ScanKeywords, ScanKeywordTokens);
	while ((token = core_yylex(&yylval, &yylloc, scanner)) != 0)
	{
		if (token != PARAM)
			continue;
		if (yylval.ival == 1)
			*uses_first = true;
		else if (yylval.ival != 2 && *bad_param < 0)
			*bad_param = yylval.ival;	/* the first one out of 1..2 */
	}
	scanner_finish(scanner);
}

/*
 * Is this raw statement one that runs with parameters as a single remote
 * command: INSERT, UPDATE, DELETE, MERGE, SELECT (but not SELECT INTO,
 * which creates a table) or CALL?
 */
static bool
obx_statement_accepted(Node *stmt)
{
	switch (nodeTag(stmt))
	{
		case T_InsertStmt:
		case T_UpdateStmt:
		case T_DeleteStmt:
		case T_MergeStmt:
		case T_CallStmt:
			return true;
		case T_SelectStmt:
			return ((SelectStmt *) stmt)->intoClause == NULL;
		default:
			return false;
	}
}

/*
 * Check, when a remote route is created, that its server exists, is of a
 * wrapper we can read, and that the creator may use it: a non-superuser
 * needs USAGE on the server and a password in the user mapping (theirs or
 * PUBLIC), the rule dblink and postgres_fdw apply.  No connection is made.
 */
void
RemoteCheckRoute(const char *server_name, Oid creator)
{
	ForeignServer *server;
	UserMapping *mapping = NULL;
	ObxConnOptions options;
	char	   *wrapper;

	server = GetForeignServerByName(server_name, false);

	if (!obx_wrapper_accepted(server, &wrapper))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("server \"%s\" cannot be used for a remote route",
						server->servername),
				 errdetail("The server uses foreign-data wrapper \"%s\", but remote routes need dblink_fdw or postgres_fdw.",
						   wrapper)));

	if (!superuser_arg(creator))
	{
		AclResult	aclresult;

		aclresult = pg_foreign_server_aclcheck(server->serverid, creator,
											   ACL_USAGE);
		if (aclresult != ACLCHECK_OK)
			aclcheck_error(aclresult, OBJECT_FOREIGN_SERVER,
						   server->servername);
	}

	if (obx_mapping_exists(creator, server->serverid))
		mapping = GetUserMapping(creator, server->serverid);

	obx_build_options(server, mapping, &options);
	obx_check_options(&options);

	if (!superuser_arg(creator) && !options.has_password)
		ereport(ERROR,
				(errcode(ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
				 errmsg("password is required"),
				 errdetail("Non-superusers must provide a password in the user mapping.")));
}

/*
 * Is the server's foreign-data wrapper one whose options are libpq
 * connection options?  Returns the wrapper's name in *wrapper.
 */
static bool
obx_wrapper_accepted(ForeignServer *server, char **wrapper)
{
	ForeignDataWrapper *fdw = GetForeignDataWrapper(server->fdwid);

	*wrapper = fdw->fdwname;
	return strcmp(fdw->fdwname, "dblink_fdw") == 0 ||
		strcmp(fdw->fdwname, "postgres_fdw") == 0;
}

/*
 * Is there a user mapping for the role, or a PUBLIC one, on the server?
 * GetUserMapping raises an error when there is none; delivery must not.
 */
static bool
obx_mapping_exists(Oid userid, Oid serverid)
{
	return SearchSysCacheExists2(USERMAPPINGUSERSERVER,
								 ObjectIdGetDatum(userid),
								 ObjectIdGetDatum(serverid)) ||
		SearchSysCacheExists2(USERMAPPINGUSERSERVER,
							  ObjectIdGetDatum(InvalidOid),
							  ObjectIdGetDatum(serverid));
}

/* The role's name for a message, or its oid if it is gone. */
static char *
obx_role_name(Oid roleid)
{
	char	   *name = GetUserNameFromId(roleid, true);

	return name ? name : psprintf("oid %u", roleid);
}



/* ---------------------------------------------------------------------
 * Connection options
 * ---------------------------------------------------------------------
 */

/*
 * Is keyword a libpq connection option that a server or user mapping may
 * set?  Wrapper options that are not libpq's (postgres_fdw's fetch_size,
 * use_remote_estimate, ...) are skipped, and so are libpq's debug options
 * and the two set on every connection here.
 */
static bool
obx_is_libpq_option(const char *keyword)
{
	PQconninfoOption *opt;

	if (ObxLibpqOptions == NULL)
	{
		ObxLibpqOptions = PQconndefaults();
		if (ObxLibpqOptions == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory"),
					 errdetail("Could not get the libpq default connection options.")));
	}

	if (strcmp(keyword, "client_encoding") == 0 ||
		strcmp(keyword, "fallback_application_name") == 0)
		return false;

	for (opt = ObxLibpqOptions; opt->keyword != NULL; opt++)
	{
		if (strcmp(opt->keyword, keyword) == 0)
			return strchr(opt->dispchar, 'D') == NULL;
	}
	return false;
}

/* Append one option, keeping both arrays NULL-terminated. */
static void
obx_add_option(ObxConnOptions *options, const char *keyword, const char *value)
{
	options->keywords[options->count] = keyword;
	options->values[options->count] = value;
	options->count++;
	options->keywords[options->count] = NULL;
	options->values[options->count] = NULL;
}

/*
 * Build the libpq options of a connection: the server's, then the user
 * mapping's (later ones win in libpq), then application_name unless one is
 * given, fallback_application_name and client_encoding = the database's
 * encoding, so that the envelope and the remote messages need no
 * conversion here.  Notes whether a password is among them and which
 * option, if any, a server-side client may not pass on.
 */
static void
obx_build_options(ForeignServer *server, UserMapping *mapping,
				  ObxConnOptions *options)
{
	List	   *lists[2];
	bool		have_appname = false;
	int			n;
	int			i;

	lists[0] = server->options;
	lists[1] = mapping != NULL ? mapping->options : NIL;
	n = list_length(lists[0]) + list_length(lists[1]) + 3;

	options->keywords = palloc((n + 1) * sizeof(char *));
	options->values = palloc((n + 1) * sizeof(char *));
	options->count = 0;
	options->keywords[0] = NULL;
	options->values[0] = NULL;
	options->has_password = false;
	options->unsafe_option = NULL;

	for (i = 0; i < 2; i++)
	{
		ListCell   *lc;

		foreach(lc, lists[i])
		{
			DefElem    *def = (DefElem *) lfirst(lc);
			const char *value = defGetString(def);

			if (!obx_is_libpq_option(def->defname))
				continue;
			if (strcmp(def->defname, "password") == 0 && value[0] != '\0')
				options->has_password = true;
			if (strcmp(def->defname, "application_name") == 0)
				have_appname = true;
			obx_add_option(options, def->defname, value);
		}
	}

	if (!have_appname)
		obx_add_option(options, "application_name", OBX_APPLICATION_NAME);
	obx_add_option(options, "fallback_application_name", OBX_APPLICATION_NAME);
	obx_add_option(options, "client_encoding", GetDatabaseEncodingName());

	for (i = 0; i < options->count; i++)
	{
		if (!ObxProxyOptionAllowed(options->keywords[i]))
		{
			options->unsafe_option = options->keywords[i];
			break;
		}
	}
}

/*
 * Raise an error if an option may not be passed on by a server-side
 * client (for route creation; delivery reports it without raising).
 */
static void
obx_check_options(const ObxConnOptions *options)
{
	if (options->unsafe_option != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to set connection option \"%s\"",
						options->unsafe_option)));
}

/*
 * Resolve a route's destination for the delivering role: the server by
 * name, its wrapper, the role's (or PUBLIC) user mapping and the libpq
 * options.  Returns false with *error when the configuration does not
 * allow a delivery; never raises an error for that.
 */
static bool
obx_resolve_target(const char *server_name, Oid userid, ObxTarget *target,
				   char **error)
{
	ForeignServer *server;
	UserMapping *mapping;
	char	   *wrapper;

	server = GetForeignServerByName(server_name, true);
	if (server == NULL)
	{
		*error = psprintf("42704: server \"%s\" does not exist", server_name);
		return false;
	}
	if (!obx_wrapper_accepted(server, &wrapper))
	{
		*error = psprintf("22023: server \"%s\" cannot be used for a remote route\n"
						  "DETAIL: The server uses foreign-data wrapper \"%s\", but remote routes need dblink_fdw or postgres_fdw.",
						  server->servername, wrapper);
		return false;
	}
	/* the rule of dblink: using a server needs USAGE on it */
	if (!superuser_arg(userid) &&
		pg_foreign_server_aclcheck(server->serverid, userid, ACL_USAGE) != ACLCHECK_OK)
	{
		*error = psprintf("42501: permission denied for foreign server %s",
						  server->servername);
		return false;
	}
	if (!obx_mapping_exists(userid, server->serverid))
	{
		*error = psprintf("28000: no user mapping for role \"%s\" on server \"%s\"",
						  obx_role_name(userid), server->servername);
		return false;
	}
	mapping = GetUserMapping(userid, server->serverid);

	target->serverid = server->serverid;
	target->servername = server->servername;
	target->userid = userid;
	target->umid = mapping->umid;
	obx_build_options(server, mapping, &target->options);

	if (target->options.unsafe_option != NULL)
	{
		*error = psprintf("42501: permission denied to set connection option \"%s\"\n"
						  "CONTEXT: connection to server \"%s\"",
						  target->options.unsafe_option, server->servername);
		return false;
	}
	return true;
}


/* ---------------------------------------------------------------------
 * Delivery
 * ---------------------------------------------------------------------
 */

/*
 * Run a route's command on the remote server for one message.
 *
 * Returns true when the remote command committed.  Otherwise returns false
 * with a palloc'd *error.  Raises an error only for interrupts and local
 * resource exhaustion.  Must be called inside a transaction (it reads the
 * catalogs); the remote command commits on its own.
 */
bool
RemoteDeliver(const char *server_name, Oid userid, bool require_password,
			  const char *command, const char *envelope, const char *topic,
			  TimestampTz deadline, char **error)
{
	ObxTarget	target;
	bool		ok;

	*error = NULL;
	obx_latch_consumed = false;

	/* Connections to a changed (or dropped) server go first. */
	if (ObxConnections != NULL)
		obx_close_invalidated();

	if (!obx_resolve_target(server_name, userid, &target, error))
		ok = false;
	else
		ok = obx_deliver(&target, require_password, command, envelope, topic,
						 deadline, error);

	if (!ok)
	{
		if (*error == NULL)		/* every failure path sets it; be safe */
			*error = pstrdup("XX000: remote delivery failed");
		obx_make_text_safe(*error);
	}

	/*
	 * The waits reset our latch; whatever set it meanwhile (a commit waking
	 * the worker, say) must still find it set when we return.
	 */
	if (obx_latch_consumed)
		SetLatch(MyLatch);

	return ok;
}

/*
 * Deliver through the cached connection of the target, making sure that
 * an error (interrupt, out of memory) leaves no connection or FD behind:
 * the connection is then cancelled, closed and forgotten, and the error
 * goes on.
 */
static bool
obx_deliver(ObxTarget *target, bool require_password, const char *command,
			const char *envelope, const char *topic, TimestampTz deadline,
			char **error)
{
	TimestampTz start = GetCurrentTimestamp();
	ObxConnEntry *volatile entry = NULL;
	volatile bool ok = false;

	obx_cache_init();

	PG_TRY();
	{
		entry = obx_entry_for(target);
		ok = obx_deliver_on(entry, target, require_password, command,
							envelope, topic, start, deadline, error);
	}
	PG_CATCH();
	{
		if (entry != NULL)
			obx_abandon(entry);
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
obx_deliver_on(ObxConnEntry *entry, ObxTarget *target, bool require_password,
			   const char *command, const char *envelope, const char *topic,
			   TimestampTz start, TimestampTz deadline, char **error)
{
	int			attempt;

	for (attempt = 1;; attempt++)
	{
		bool		reused = false;
		ObxOutcome	outcome;

		if (entry->conn != NULL)
		{
			if (obx_entry_usable(entry, target, require_password))
				reused = true;
			else
				obx_disconnect(entry);
		}
		if (entry->conn == NULL &&
			!obx_connect(entry, target, require_password, start, deadline,
						 error))
			return false;

		outcome = obx_run_command(entry, target->servername, command,
								  envelope, topic, start, deadline, error);
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
			obx_disconnect(entry);
			pfree(*error);
			*error = NULL;
			continue;
		}

		obx_disconnect(entry);
		return false;
	}
}

/*
 * Send the command with the envelope and topic as typed parameters and
 * wait for its results until the deadline.  On timeout, cancel it remotely
 * and give it a short grace to end.
 */
static ObxOutcome
obx_run_command(ObxConnEntry *entry, const char *servername,
				const char *command, const char *envelope, const char *topic,
				TimestampTz start, TimestampTz deadline, char **error)
{
	PGconn	   *conn = entry->conn;
	const Oid	types[2] = {JSONBOID, TEXTOID};
	const char *values[2];
	ObxResults	results;
	ObxWaitStatus status;

	values[0] = envelope;
	values[1] = topic;
	results.ok = false;
	results.error = NULL;

	if (GetCurrentTimestamp() >= deadline)
	{
		*error = psprintf("57014: remote command timed out after %ld ms on server \"%s\"",
						  obx_elapsed_ms(start), servername);
		return OBX_FAILED;
	}

	if (!PQsendQueryParams(conn, command, 2, types, values, NULL, NULL, 0))
	{
		*error = obx_connection_error(conn, servername);
		return OBX_BROKEN;
	}
	entry->busy = true;

	status = obx_collect(conn, servername, deadline, &results);
	if (status == OBX_WAIT_TIMEOUT)
	{
		long		elapsed = obx_elapsed_ms(start);
		TimestampTz grace;

		/*
		 * If the command ends before the cancel reaches it, it has committed
		 * and the message is delivered; otherwise the cancel keeps it from
		 * committing later, unseen.  The connection goes either way.
		 */
		obx_send_cancel(conn, servername, true);
		grace = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											OBX_CANCEL_WAIT_MS);
		status = obx_collect(conn, servername, grace, &results);
		entry->busy = false;
		if (status == OBX_WAIT_DONE && results.ok)
			return OBX_DONE;

		if (results.error != NULL)
			pfree(results.error);
		*error = psprintf("57014: remote command timed out after %ld ms on server \"%s\"",
						  elapsed, servername);
		return OBX_BROKEN;
	}
	entry->busy = false;

	if (status == OBX_WAIT_BROKEN)
	{
		*error = results.error != NULL ? results.error :
			obx_connection_error(conn, servername);
		return OBX_BROKEN;
	}
	if (results.ok)
		return OBX_DONE;

	*error = results.error != NULL ? results.error :
		psprintf("08P01: remote command returned no result\n"
				 "CONTEXT: remote command on server \"%s\"", servername);
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

		rc = obx_wait(conn, events, deadline);
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
		switch (PQresultStatus(res))
		{
			case PGRES_COMMAND_OK:
			case PGRES_TUPLES_OK:
				results->ok = (results->error == NULL);
				break;
			case PGRES_COPY_IN:
			case PGRES_COPY_OUT:
			case PGRES_COPY_BOTH:
				results->ok = false;
				if (results->error == NULL)
					results->error =
						psprintf("0A000: remote command started a COPY, which a route cannot serve\n"
								 "CONTEXT: remote command on server \"%s\"",
								 servername);
				usable = false;
				break;
			default:
				results->ok = false;
				if (results->error == NULL)
					results->error = obx_remote_error(conn, res, servername);
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
 * Wait until the socket is ready for events, the latch is set or the
 * deadline passes, serving interrupts when the latch is set.  Returns the
 * WL_* events that happened.  PQconnectPoll ignores connect_timeout, so
 * this deadline is the only bound on connecting as well.
 */
static int
obx_wait(PGconn *conn, int events, TimestampTz deadline)
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

/*
 * Ask the remote server to cancel the running command.  Best effort: the
 * caller drops the connection anyway.  PQcancel opens a connection of its
 * own to the address that answered moments ago; libpq 15 has no
 * nonblocking form of it.
 */
static void
obx_send_cancel(PGconn *conn, const char *servername, bool report)
{
	PGcancel   *cancel = PQgetCancel(conn);
	char		errbuf[256];
	bool		sent;

	if (cancel == NULL)
		return;
	sent = PQcancel(cancel, errbuf, sizeof(errbuf));
	PQfreeCancel(cancel);

	if (!sent && report)
		ereport(WARNING,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not send cancel request to server \"%s\"",
						servername),
				 errdetail_internal("%s", errbuf)));
}

/* Milliseconds since start. */
static long
obx_elapsed_ms(TimestampTz start)
{
	return TimestampDifferenceMilliseconds(start, GetCurrentTimestamp());
}


/* ---------------------------------------------------------------------
 * Error texts
 * ---------------------------------------------------------------------
 */

/*
 * Format a failed remote command: the remote SQLSTATE and primary message,
 * its detail and hint, and a context naming the server (after the remote
 * context, if any).  Without a SQLSTATE the failure was the connection's.
 */
static char *
obx_remote_error(PGconn *conn, const PGresult *res, const char *servername)
{
	const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
	const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);
	const char *context = PQresultErrorField(res, PG_DIAG_CONTEXT);
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "%s: ", sqlstate != NULL ? sqlstate : "08006");
	if (primary != NULL)
		appendStringInfoString(&buf, primary);
	else
	{
		char	   *message = pchomp(PQerrorMessage(conn));

		appendStringInfoString(&buf, message[0] != '\0' ? message :
							   "could not obtain message string for remote error");
	}
	if (detail != NULL)
		appendStringInfo(&buf, "\nDETAIL: %s", detail);
	if (hint != NULL)
		appendStringInfo(&buf, "\nHINT: %s", hint);
	appendStringInfoString(&buf, "\nCONTEXT: ");
	if (context != NULL)
		appendStringInfo(&buf, "%s\n", context);
	appendStringInfo(&buf, "remote command on server \"%s\"", servername);

	return buf.data;
}

/* Format a connection that failed while a command was under way. */
static char *
obx_connection_error(PGconn *conn, const char *servername)
{
	char	   *message = pchomp(PQerrorMessage(conn));

	return psprintf("08006: %s\nCONTEXT: remote command on server \"%s\"",
					message[0] != '\0' ? message : "connection to the remote server failed",
					servername);
}

/*
 * A message from before the session's client_encoding was in force (such
 * as an authentication failure) comes in the remote server's encoding.
 * Keep the text valid in ours by replacing non-ASCII bytes if it is not.
 */
static void
obx_make_text_safe(char *str)
{
	char	   *p;

	if (pg_verifymbstr(str, strlen(str), true))
		return;
	for (p = str; *p; p++)
	{
		if (IS_HIGHBIT_SET(*p))
			*p = '?';
	}
}


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
	ctl.keysize = sizeof(ObxConnKey);
	ctl.entrysize = sizeof(ObxConnEntry);
	ctl.hcxt = ObxRemoteContext;
	connections = hash_create("krizaka_outbox remote connections", 8, &ctl,
							  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	CacheRegisterSyscacheCallback(FOREIGNSERVEROID, obx_inval_callback,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(USERMAPPINGOID, obx_inval_callback,
								  (Datum) 0);

	/*
	 * A FATAL exit (terminate, postmaster death) leaves by proc_exit, not
	 * through our PG_CATCH: cancel a command still running remotely there,
	 * or it would go on and maybe commit after we are gone.
	 */
	on_proc_exit(obx_at_exit, (Datum) 0);

	/* Published last: the callbacks ignore a cache that does not exist. */
	ObxConnections = connections;
}

/* The cache entry of the target's server and role, created if new. */
static ObxConnEntry *
obx_entry_for(ObxTarget *target)
{
	ObxConnKey	key;
	ObxConnEntry *entry;
	bool		found;

	MemSet(&key, 0, sizeof(key));
	key.serverid = target->serverid;
	key.userid = target->userid;

	entry = hash_search(ObxConnections, &key, HASH_ENTER, &found);
	if (!found)
	{
		entry->conn = NULL;
		entry->umid = InvalidOid;
		entry->server_hash = 0;
		entry->mapping_hash = 0;
		entry->invalidated = false;
		entry->used_password = false;
		entry->busy = false;
		namestrcpy(&entry->servername, target->servername);
	}
	return entry;
}

/*
 * May the entry's connection carry this delivery?  Not if the server or
 * user mapping changed, if a password is required but the connection was
 * made without one, or if the session is not idle and well.  Reading what
 * arrived while it was idle reveals a session the remote side closed.
 */
static bool
obx_entry_usable(ObxConnEntry *entry, ObxTarget *target, bool require_password)
{
	if (entry->invalidated || entry->umid != target->umid)
		return false;
	if (require_password && !entry->used_password)
		return false;
	if (!PQconsumeInput(entry->conn))
		return false;
	return PQstatus(entry->conn) == CONNECTION_OK &&
		PQtransactionStatus(entry->conn) == PQTRANS_IDLE;
}

/*
 * Connect the entry to its server without blocking, by the deadline.
 * For a non-superuser's route (require_password) the options must carry a
 * password and the server must have asked for it, the rule dblink applies.
 */
static bool
obx_connect(ObxConnEntry *entry, ObxTarget *target, bool require_password,
			TimestampTz start, TimestampTz deadline, char **error)
{
	PostgresPollingStatusType status;
	PGconn	   *conn;

	if (require_password && !target->options.has_password)
	{
		*error = psprintf("2F003: password is required\n"
						  "DETAIL: Non-superusers must provide a password in the user mapping.\n"
						  "CONTEXT: connection to server \"%s\"",
						  target->servername);
		return false;
	}
	if (GetCurrentTimestamp() >= deadline)
	{
		*error = psprintf("08001: connection to server \"%s\" timed out after %ld ms",
						  target->servername, obx_elapsed_ms(start));
		return false;
	}

	/* A connection is one long-lived file descriptor in fd.c's budget. */
	if (!AcquireExternalFD())
	{
		*error = psprintf("08001: could not connect to server \"%s\": there are too many open files on the local server\n"
						  "HINT: Raise the server's max_files_per_process and/or \"ulimit -n\" limits.",
						  target->servername);
		return false;
	}
	conn = PQconnectStartParams(target->options.keywords,
								target->options.values, false);
	if (conn == NULL)
	{
		ReleaseExternalFD();
		*error = psprintf("08001: could not connect to server \"%s\": out of memory",
						  target->servername);
		return false;
	}

	/* From here on obx_disconnect releases the connection and its FD. */
	entry->conn = conn;
	entry->umid = target->umid;
	entry->server_hash = GetSysCacheHashValue1(FOREIGNSERVEROID,
											   ObjectIdGetDatum(target->serverid));
	entry->mapping_hash = GetSysCacheHashValue1(USERMAPPINGOID,
												ObjectIdGetDatum(target->umid));
	entry->invalidated = false;
	entry->used_password = false;
	entry->busy = false;
	namestrcpy(&entry->servername, target->servername);
	PQsetNoticeReceiver(conn, obx_notice_receiver, entry);

	/* Per PQconnectPoll's contract, first wait until the socket is writable. */
	status = PQstatus(conn) == CONNECTION_BAD ?
		PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
	while (status != PGRES_POLLING_OK && status != PGRES_POLLING_FAILED)
	{
		int			events;
		int			rc;

		if (GetCurrentTimestamp() >= deadline)
		{
			*error = psprintf("08001: connection to server \"%s\" timed out after %ld ms",
							  target->servername, obx_elapsed_ms(start));
			obx_disconnect(entry);
			return false;
		}

		events = status == PGRES_POLLING_READING ?
			WL_SOCKET_READABLE : WL_SOCKET_WRITEABLE;
		rc = obx_wait(conn, events, deadline);
		if (rc & events)
			status = PQconnectPoll(conn);
	}

	if (status == PGRES_POLLING_FAILED)
	{
		*error = psprintf("08001: could not connect to server \"%s\": %s",
						  target->servername, pchomp(PQerrorMessage(conn)));
		obx_disconnect(entry);
		return false;
	}

	entry->used_password = PQconnectionUsedPassword(conn);
	if (require_password && !entry->used_password)
	{
		*error = psprintf("2F003: password is required\n"
						  "DETAIL: Non-superuser cannot connect if the server does not request a password.\n"
						  "HINT: Target server's authentication method must be changed.\n"
						  "CONTEXT: connection to server \"%s\"",
						  target->servername);
		obx_disconnect(entry);
		return false;
	}

	if (PQsetnonblocking(conn, 1) != 0)
	{
		*error = psprintf("08001: could not connect to server \"%s\": %s",
						  target->servername, pchomp(PQerrorMessage(conn)));
		obx_disconnect(entry);
		return false;
	}
	return true;
}

/* Close the entry's connection, if any, and release its FD. */
static void
obx_disconnect(ObxConnEntry *entry)
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

/* Drop a connection left behind by an error, cancelling its command first. */
static void
obx_abandon(ObxConnEntry *entry)
{
	if (entry->conn != NULL && entry->busy)
		obx_send_cancel(entry->conn, NameStr(entry->servername), false);
	obx_disconnect(entry);
}

/* Close the connections whose server or user mapping changed. */
static void
obx_close_invalidated(void)
{
	HASH_SEQ_STATUS scan;
	ObxConnEntry *entry;

	hash_seq_init(&scan, ObxConnections);
	while ((entry = (ObxConnEntry *) hash_seq_search(&scan)) != NULL)
	{
		if (entry->conn != NULL && entry->invalidated && !entry->busy)
			obx_disconnect(entry);
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
	ObxConnEntry *entry;

	if (ObxConnections == NULL)
		return;

	hash_seq_init(&scan, ObxConnections);
	while ((entry = (ObxConnEntry *) hash_seq_search(&scan)) != NULL)
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
	ObxConnEntry *entry = (ObxConnEntry *) arg;
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

/* proc_exit callback: close every connection, cancelling running commands. */
static void
obx_at_exit(int code, Datum arg)
{
	RemoteDisconnectAll();
}

/*
 * Close every cached connection, cancelling a command still running.  For
 * the worker on its way out; safe to call when nothing is cached.
 */
void
RemoteDisconnectAll(void)
{
	HASH_SEQ_STATUS scan;
	ObxConnEntry *entry;

	if (ObxConnections == NULL)
		return;

	hash_seq_init(&scan, ObxConnections);
	while ((entry = (ObxConnEntry *) hash_seq_search(&scan)) != NULL)
		obx_abandon(entry);
}
