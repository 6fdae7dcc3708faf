/*-------------------------------------------------------------------------
 *
 * outbox_remote_probe.c
 *		The check of a remote route before it is trusted
 *		(outbox.check_route): its server and user mapping, a connection
 *		made as delivery makes it, and its command prepared remotely.
 *
 * Every step is the one delivery takes, with the same code: the route's
 * creator is the delivering role, the server and user mapping are
 * resolved and checked as at each delivery (RemoteResolve, and the
 * password rule for a non-superuser's route), the connection is made
 * without blocking, by the same deadline (outbox.remote_timeout_ms), and
 * the command is prepared as an unnamed statement with the parameter
 * types of a delivery.  Preparing analyses the command remotely (its
 * tables, columns, functions and types, and the remote role's rights to
 * them) without running it.  Each step gives one row; the rows stop after
 * the first that fails.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>

#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"

#include "outbox.h"
#include "outbox_remote_int.h"

static RouteCheckStep *obx_step(List **steps, const char *step, bool ok,
								const OutboxError *error, char *message);
static char *obx_lookup_note(const RemoteOptions *options);
static bool obx_is_address(const char *host);

/*
 * Check a remote route: server_name and command as stored, creator the
 * role that made it (InvalidOid: gone) and created_by its name.  Returns the steps, as RouteCheckSteps,
 * in order: server, connect, prepare, up to the first that failed.  Never
 * raises an error for what it finds; an interrupt or local resource
 * exhaustion raises one as usual.
 */
List *
RemoteProbeRoute(const char *server_name, Oid creator,
				 const char *created_by, const char *command)
{
	List	   *steps = NIL;
	OutboxError error;
	RemoteDestination dest;
	bool		require_password;
	RemoteCall *call;
	const OutboxError *failure;
	RemoteOutcome outcome;
	char	   *note;

	OutboxErrorClear(&error);

	/* the server step: the creator, the server, the mapping, the options */
	if (!OidIsValid(creator))
	{
		OutboxErrorSet(&error, ERRCODE_UNDEFINED_OBJECT,
					   "role \"%s\" that made the route does not exist",
					   created_by);
		OutboxErrorHint(&error, "Make the route again with outbox.route_remote.");
		obx_step(&steps, "server", false, &error, NULL);
		return steps;
	}
	require_password = !superuser_arg(creator);
	if (!RemoteResolve(server_name, creator, &dest, &error) ||
		!RemoteCheckOptions(&dest.options, require_password, &error))
	{
		obx_step(&steps, "server", false, &error, NULL);
		return steps;
	}
	note = obx_lookup_note(&dest.options);
	obx_step(&steps, "server", true, NULL,
			 psprintf("server \"%s\" with the user mapping of role \"%s\"%s%s",
					  dest.servername, created_by,
					  note ? "; " : "", note ? note : ""));

	/* connect and prepare, as a delivery would */
	call = RemoteProbeStart(server_name, creator, require_password, command,
							TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														outbox_remote_timeout_ms));
	RemoteCallWait(call);
	outcome = RemoteCallOutcome(call, &failure);

	switch (RemoteCallStageOf(call))
	{
		case REMOTE_STAGE_SERVER:
			/* changed since the check above; say so where it happened */
			obx_step(&steps, "server", false, failure, NULL);
			return steps;
		case REMOTE_STAGE_CONNECT:
			obx_step(&steps, "connect", false, failure, NULL);
			return steps;
		case REMOTE_STAGE_COMMAND:
			obx_step(&steps, "connect", true, NULL,
					 psprintf("connected to server \"%s\"", dest.servername));
			break;
	}
	if (outcome == REMOTE_DELIVERED)
		obx_step(&steps, "prepare", true, NULL,
				 pstrdup("the command was prepared remotely; it was not run"));
	else
		obx_step(&steps, "prepare", false, failure, NULL);
	return steps;
}

/*
 * Append a step: a success with its message, or a failure with the
 * condition's SQLSTATE and its text (as last_error would have it, without
 * the SQLSTATE).
 */
static RouteCheckStep *
obx_step(List **steps, const char *step, bool ok, const OutboxError *error,
		 char *message)
{
	RouteCheckStep *s = palloc0(sizeof(RouteCheckStep));

	s->step = step;
	s->ok = ok;
	if (!ok)
	{
		char	   *text = OutboxErrorText(error);

		s->sqlstate = pstrdup(unpack_sql_state(error->sqlerrcode));
		/* the text starts with "SQLSTATE: " */
		s->message = pstrdup(text + strlen(s->sqlstate) + 2);
	}
	else
		s->message = message;
	*steps = lappend(*steps, s);
	return s;
}

/*
 * A note when connecting will look a host name up: libpq resolves it
 * blocking, inside PQconnectStartParams, and the worker's loop waits for
 * it.  None when the options give hostaddr, or every host is an address
 * or a socket directory.
 */
static char *
obx_lookup_note(const RemoteOptions *options)
{
	const char *host = NULL;
	int			i;

	for (i = 0; i < options->count; i++)
	{
		if (strcmp(options->keywords[i], "hostaddr") == 0 &&
			options->values[i][0] != '\0')
			return NULL;
		if (strcmp(options->keywords[i], "host") == 0)
			host = options->values[i];
	}
	if (host == NULL || host[0] == '\0')
		return NULL;

	/* a comma-separated list: each one */
	{
		char	   *hosts = pstrdup(host);
		char	   *h;
		char	   *save = NULL;

		for (h = strtok_r(hosts, ",", &save); h != NULL;
			 h = strtok_r(NULL, ",", &save))
		{
			while (*h == ' ')
				h++;
			if (h[0] != '/' && h[0] != '@' && !obx_is_address(h))
				return psprintf("host \"%s\" is looked up by name at each connection, which holds up the worker while it resolves; give the server a hostaddr option as well",
								h);
		}
	}
	return NULL;
}

/* Is host a numeric IPv4 or IPv6 address? */
static bool
obx_is_address(const char *host)
{
	unsigned char buf[16];

	return inet_pton(AF_INET, host, buf) == 1 ||
		inet_pton(AF_INET6, host, buf) == 1;
}
