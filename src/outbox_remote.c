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
 * Delivery itself is not here yet.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "common/keywords.h"
#include "foreign/foreign.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "parser/gramparse.h"
#include "parser/parser.h"
#include "parser/scanner.h"
#include "storage/ipc.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "outbox.h"

/*
 * Version-specific server calls, kept in one place for ports.
 *
 * libpq/libpq-be-fe-helpers.h with libpqsrv_is_valid_proxy_option() exists
 * in the minor releases we build against (15.20); it says which libpq
 * options a server-side client may pass on a user's behalf.  Without it, any
 * non-debug libpq option of the server and user mapping is passed, as the
 * wrappers' own validators already restrict them.
 */
#if PG_VERSION_NUM >= 150020
#include "libpq/libpq-be-fe-helpers.h"
#define OBX_OPTION_IS_SAFE(keyword)	libpqsrv_is_valid_proxy_option(keyword)
#define OBX_CHECK_OPTIONS(opts)		libpqsrv_check_proxy_conninfo_opts(opts)
#else
#include "libpq-fe.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/wait_event.h"
#define OBX_OPTION_IS_SAFE(keyword)	true
#define OBX_CHECK_OPTIONS(opts)		((void) (opts))
#endif

#define OBX_APPLICATION_NAME	"krizaka_outbox"

/* libpq connection options built from a server and a user mapping */
typedef struct ObxConnOptions
{
	const char **keywords;		/* NULL-terminated, for PQconnectStartParams */
	const char **values;
	int			count;
	bool		has_password;	/* a non-empty password is among them */
	const char *unsafe_option;	/* the first one a server may not pass on */
} ObxConnOptions;

static PQconninfoOption *ObxLibpqOptions = NULL;	/* from PQconndefaults */

/* route checks */
static List *obx_parse_command(const char *command);
static void obx_scan_params(const char *command, int *max_param,
							bool *uses_first);
static bool obx_statement_accepted(Node *stmt);
static bool obx_wrapper_accepted(ForeignServer *server, char **wrapper);
static bool obx_mapping_exists(Oid userid, Oid serverid);

/* connection options */
static bool obx_is_libpq_option(const char *keyword);
static void obx_add_option(ObxConnOptions *options, const char *keyword,
						   const char *value);
static void obx_build_options(ForeignServer *server, UserMapping *mapping,
							  ObxConnOptions *options);
static void obx_check_options(const ObxConnOptions *options);

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
	int			max_param;
	bool		uses_first;

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
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("remote command cannot be a %s statement",
						(IsA(raw->stmt, SelectStmt) ? "SELECT INTO" :
						 CreateCommandName(raw->stmt))),
				 errdetail("A remote command must be one INSERT, UPDATE, DELETE, MERGE, SELECT or CALL statement.")));

	obx_scan_params(command, &max_param, &uses_first);
	if (max_param > 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("remote command uses parameter $%d", max_param),
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
obx_scan_params(const char *command, int *max_param, bool *uses_first)
{
	core_yyscan_t scanner;
	core_yy_extra_type yyextra;
	core_YYSTYPE yylval;
	YYLTYPE		yylloc;
	int			token;

	*max_param = 0;
	*uses_first = false;

	scanner = scanner_init(command, &yyextra, &ScanKeywords, ScanKeywordTokens);
	while ((token = core_yylex(&yylval, &yylloc, scanner)) != 0)
	{
		if (token != PARAM)
			continue;
		if (yylval.ival == 1)
			*uses_first = true;
		/* $0 is as wrong as $3: report it as out of range */
		if (yylval.ival < 1)
			*max_param = Max(*max_param, 3);
		else
			*max_param = Max(*max_param, yylval.ival);
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
		if (!OBX_OPTION_IS_SAFE(options->keywords[i]))
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
	PQconninfoOption *opts;
	int			i;

	opts = palloc0((options->count + 1) * sizeof(PQconninfoOption));
	for (i = 0; i < options->count; i++)
	{
		opts[i].keyword = unconstify(char *, options->keywords[i]);
		opts[i].val = unconstify(char *, options->values[i]);
	}
	OBX_CHECK_OPTIONS(opts);
	pfree(opts);
}

/* ---------------------------------------------------------------------
 * Delivery
 * ---------------------------------------------------------------------
 */

/* Run the route's command remotely with the envelope and topic. */
bool
RemoteDeliver(const char *server_name, Oid userid, bool require_password,
			  const char *command, const char *envelope, const char *topic,
			  TimestampTz deadline, char **error)
{
	*error = pstrdup("remote delivery is not available");
	return false;
}
