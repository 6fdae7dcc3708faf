/*-------------------------------------------------------------------------
 *
 * outbox_remote_options.c
 *		The libpq options of a remote connection, built from a foreign
 *		server and a user mapping, and whether a connection may be made
 *		with them.
 *
 * The server gives the connection options and the user mapping of the
 * delivering role the credentials.  Nothing is added to what the remote
 * session runs with but its application_name and client_encoding: the
 * route's command runs with the remote role's own settings (its
 * search_path among them), as dblink_exec would run it, and no startup
 * "options" are sent that a connection pooler in between would refuse.
 *
 * Both the checks at route creation (outbox_remote_check.c) and the
 * connections (outbox_remote_conn.c) use this file; it uses neither.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/defrem.h"
#include "mb/pg_wchar.h"

#include "outbox_compat.h"
#include "outbox_remote_int.h"

#define OBX_APPLICATION_NAME	"krizaka_outbox"

static PQconninfoOption *ObxLibpqOptions = NULL;	/* from PQconndefaults */

static bool obx_is_libpq_option(const char *keyword);
static void obx_add_option(RemoteOptions *options, const char *keyword,
						   const char *value);

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
obx_add_option(RemoteOptions *options, const char *keyword, const char *value)
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
 *
 * Nothing else is set for the remote session: a search_path pinned in the
 * startup packet's "options" would make a command that names its table
 * without a schema fail (it runs as the route creator's own remote role,
 * which could run it directly anyway), and PgBouncer refuses a startup
 * packet with "options" unless told to ignore them.  A server or mapping
 * that gives "options" itself passes them on.
 */
void
RemoteBuildOptions(ForeignServer *server, UserMapping *mapping,
				   RemoteOptions *options)
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
 * May a connection be made with these options?  Not if one of them is an
 * option a server-side client may not pass on, nor without a password when
 * one is required (for a route of a non-superuser).  Returns false with the
 * condition in *error.
 */
bool
RemoteCheckOptions(const RemoteOptions *options, bool require_password,
				   OutboxError *error)
{
	if (options->unsafe_option != NULL)
	{
		OutboxErrorSet(error, ERRCODE_INSUFFICIENT_PRIVILEGE,
					   "permission denied to set connection option \"%s\"",
					   options->unsafe_option);
		return false;
	}
	if (require_password && !options->has_password)
	{
		OutboxErrorSet(error, ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED,
					   "password is required");
		OutboxErrorDetail(error, "Non-superusers must provide a password in the user mapping.");
		return false;
	}
	return true;
}
