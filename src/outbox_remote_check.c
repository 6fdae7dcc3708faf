/*-------------------------------------------------------------------------
 *
 * outbox_remote_check.c
 *		The checks of a remote route: its command when the route is made,
 *		and its server, wrapper, user mapping and connection options both
 *		when the route is made and at each delivery.
 *
 * A route's command must be one SQL statement that runs with parameters
 * ($1 the envelope, $2 the topic) as a single remote command; it is checked
 * once, with the core parser and scanner, when the route is made.
 *
 * The server is checked twice: when the route is made, as its creator
 * (raising an error), and at each delivery, again as its creator
 * (returning the same condition for outbox.fail, since the server, its
 * wrapper, the grants and the user mappings can change in between).  Both
 * go through the same functions, so a condition reads the same either way.
 * A non-superuser needs USAGE on the server and a password in the user
 * mapping (theirs or PUBLIC), the rule dblink and postgres_fdw apply.
 *
 * Glossary:
 *	creator		the role that makes the route (outbox.routes.created_by)
 *	delivering role	the role whose user mapping a delivery uses: the
 *				route's creator, never the worker's role or the caller
 *				of drain_once
 *	destination	a route's server resolved for the delivering role
 *				(RemoteDestination)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/keywords.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "parser/scanner.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/resowner.h"
#include "utils/syscache.h"

#include "outbox_compat.h"
#include "outbox_delivery.h"
#include "outbox_remote_int.h"

static List *obx_parse_command(const char *command);
static void obx_scan_params(const char *command, char **bad_param,
							bool *uses_first);
static bool obx_statement_accepted(Node *stmt);
static ForeignServer *obx_usable_server(const char *server_name, Oid roleid,
										OutboxError *error);
static bool obx_wrapper_accepted(ForeignServer *server, char **wrapper);
static bool obx_mapping_exists(Oid userid, Oid serverid);
static char *obx_role_name(Oid roleid);

/* ---------------------------------------------------------------------
 * The command, when the route is made
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
	char	   *bad_param;
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
	{
		const char *kind = IsA(raw->stmt, SelectStmt) ? "SELECT INTO" :
			CreateCommandName(raw->stmt);
		const char *msg;

		/*
		 * The article goes with the English name of the command (a SQL
		 * keyword, never translated); each form is a message of its own, so
		 * that a translator sees whole sentences.
		 */
		if (strchr("AEIOU", kind[0]) != NULL)
			msg = gettext_noop("remote command cannot be an %s statement");
		else
			msg = gettext_noop("remote command cannot be a %s statement");
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg(msg, kind),
				 errdetail("A remote command must be one INSERT, UPDATE, DELETE, MERGE, SELECT or CALL statement.")));
	}

	obx_scan_params(command, &bad_param, &uses_first);
	if (bad_param != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("remote command uses parameter $%s", bad_param),
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
obx_scan_params(const char *command, char **bad_param, bool *uses_first)
{
	core_yyscan_t scanner;
	core_yy_extra_type yyextra;
	core_YYSTYPE yylval;
	YYLTYPE		yylloc;
	int			token;

	*bad_param = NULL;
	*uses_first = false;

	scanner = scanner_init(command, &yyextra, &ScanKeywords, ScanKeywordTokens);
	while ((token = core_yylex(&yylval, &yylloc, scanner)) != 0)
	{
		const char *digits;
		size_t		ndigits;
		int			number = 0;

		if (!ObxScannedParam(command, yylloc))
			continue;

		/*
		 * Read the number from the text: the scanner's value wraps around
		 * beyond the range of int ($4294967297 would read as $1).  Leading
		 * zeros count for nothing, as in the server.
		 */
		digits = command + yylloc + 1;
		ndigits = strspn(digits, "0123456789");
		while (ndigits > 1 && digits[0] == '0')
		{
			digits++;
			ndigits--;
		}
		if (ndigits <= 2)
			number = atoi(pnstrdup(digits, ndigits));
		if (number == 1)
			*uses_first = true;
		else if (number != 2 && *bad_param == NULL)
			*bad_param = pnstrdup(digits, ndigits); /* the first one out of 1..2 */
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

/* ---------------------------------------------------------------------
 * The server, when the route is made and at each delivery
 * ---------------------------------------------------------------------
 */

/*
 * Check, when a remote route is created, that its server exists, is of a
 * wrapper we can read, and that the creator may use it: a non-superuser
 * needs USAGE on the server and a password in the user mapping (theirs or
 * PUBLIC).  No connection is made, and no user mapping is needed yet.
 */
void
RemoteCheckRoute(const char *server_name, Oid creator)
{
	ForeignServer *server;
	UserMapping *mapping = NULL;
	RemoteOptions options;
	OutboxError error;

	server = obx_usable_server(server_name, creator, &error);
	if (server == NULL)
		OutboxErrorThrow(&error);

	if (obx_mapping_exists(creator, server->serverid))
		mapping = GetUserMapping(creator, server->serverid);
	RemoteBuildOptions(server, mapping, &options);

	if (!RemoteCheckOptions(&options, !superuser_arg(creator), &error))
		OutboxErrorThrow(&error);
}

/*
 * Resolve a route's server for the delivering role: the server by name,
 * its wrapper, the role's (or PUBLIC) user mapping and the libpq options.
 * Returns false with the condition in *error when the configuration does
 * not allow a delivery; never raises an error for that.
 */
bool
RemoteResolve(const char *server_name, Oid userid, RemoteDestination *dest,
			  OutboxError *error)
{
	ForeignServer *server;
	UserMapping *mapping;

	server = obx_usable_server(server_name, userid, error);
	if (server == NULL)
		return false;
	if (!obx_mapping_exists(userid, server->serverid))
	{
		OutboxErrorSet(error, ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION,
					   "no user mapping for role \"%s\" on server \"%s\"",
					   obx_role_name(userid), server->servername);
		return false;
	}
	mapping = GetUserMapping(userid, server->serverid);

	dest->serverid = server->serverid;
	dest->servername = server->servername;
	dest->userid = userid;
	dest->umid = mapping->umid;
	RemoteBuildOptions(server, mapping, &dest->options);

	if (!RemoteCheckOptions(&dest->options, false, error))
	{
		OutboxErrorContext(error, "connection to server \"%s\"",
						   server->servername);
		return false;
	}
	return true;
}

/*
 * The server named server_name, if it exists, is of a wrapper we can read
 * and the role may use it (a superuser, or a role with USAGE on it).
 * Otherwise NULL, with the condition in *error.
 */
static ForeignServer *
obx_usable_server(const char *server_name, Oid roleid, OutboxError *error)
{
	ForeignServer *server;
	char	   *wrapper;

	server = GetForeignServerByName(server_name, true);
	if (server == NULL)
	{
		OutboxErrorSet(error, ERRCODE_UNDEFINED_OBJECT,
					   "server \"%s\" does not exist", server_name);
		return NULL;
	}
	if (!obx_wrapper_accepted(server, &wrapper))
	{
		OutboxErrorSet(error, ERRCODE_INVALID_PARAMETER_VALUE,
					   "server \"%s\" cannot be used for a remote route",
					   server->servername);
		OutboxErrorDetail(error, "The server uses foreign-data wrapper \"%s\", but remote routes need dblink_fdw or postgres_fdw.",
						  wrapper);
		return NULL;
	}
	if (!superuser_arg(roleid) &&
		ObxForeignServerAclcheck(server->serverid, roleid, ACL_USAGE) != ACLCHECK_OK)
	{
		/* the text of aclcheck_error(), which route creation used to raise */
		OutboxErrorSet(error, ERRCODE_INSUFFICIENT_PRIVILEGE,
					   "permission denied for foreign server %s",
					   server->servername);
		return NULL;
	}
	return server;
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
