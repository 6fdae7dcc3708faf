/*-------------------------------------------------------------------------
 *
 * outbox_remote.c
 *		Delivery to a remote PostgreSQL database through libpq (placeholder).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "outbox.h"

/* Check that a route's command is one statement using $1 (and maybe $2). */
void
RemoteCheckCommand(const char *command)
{
}

/* Check, at route creation, that the server exists and may be used. */
void
RemoteCheckRoute(const char *server_name, Oid creator)
{
}

/* Run the route's command remotely with the envelope and topic. */
bool
RemoteDeliver(const char *server_name, Oid userid, bool require_password,
			  const char *command, const char *envelope, const char *topic,
			  TimestampTz deadline, char **error)
{
	*error = pstrdup("remote delivery is not available");
	return false;
}
