/*-------------------------------------------------------------------------
 *
 * outbox_guc.c
 *		The outbox.* settings: those of every session and those of the
 *		background worker, with the worker's check hooks.
 *
 * All of them are defined on every load of the library, preloaded or not.
 * The session settings are PGC_USERSET, so that SET, ALTER ROLE ... SET and
 * ALTER DATABASE ... SET work everywhere and are validated by the GUC
 * machinery.  The worker settings follow the configuration file when the
 * library is preloaded, and outbox.claim_positions takes effect at server
 * start; otherwise they have no effect, and their check hooks say why an
 * attempt to set them fails.  The integer settings carry no unit,
 * so that SHOW prints the plain number the documentation gives.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/guc.h"
#include "utils/varlena.h"

#include "outbox.h"
#include "outbox_http.h"

int			outbox_batch_size = 50;
int			outbox_lease_seconds = 60;
int			outbox_max_attempts = 8;
int			outbox_backoff_seconds = 30;
int			outbox_backoff_max_seconds = 3600;
int			outbox_retention_days = 7;
int			outbox_subscription_max_lag = 0;
int			outbox_remote_timeout_ms = 10000;
int			outbox_remote_pause_after = 3;
int			outbox_http_timeout_ms = 10000;
bool		outbox_http_allow_private = false;
char	   *outbox_http_private_networks = NULL;

char	   *outbox_worker_databases = NULL;
char	   *outbox_worker_role = NULL;
int			outbox_worker_naptime_ms = 5000;

int			outbox_claim_positions = OUTBOX_CLAIM_POSITIONS_DEFAULT;

/* true while the worker settings are being defined: see obx_check_preloaded */
static bool obx_defining_settings = false;

static void obx_define_worker_settings(void);
static bool obx_check_preloaded(const char *name, GucSource source);
static bool obx_check_databases(char **newval, void **extra, GucSource source);
static bool obx_check_role(char **newval, void **extra, GucSource source);
static bool obx_check_naptime(int *newval, void **extra, GucSource source);
static bool obx_check_positions(int *newval, void **extra, GucSource source);
static bool obx_check_private_networks(char **newval, void **extra,
									   GucSource source);
static void obx_assign_allow_private(bool newval, void *extra);

/* Define every setting; called from _PG_init on every load. */
void
OutboxGucInit(void)
{
	DefineCustomIntVariable("outbox.batch_size",
							"Number of messages claim leases when no batch size is passed.",
							NULL,
							&outbox_batch_size,
							50, OUTBOX_BATCH_SIZE_MIN, OUTBOX_BATCH_SIZE_MAX,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.lease_seconds",
							"Length of a lease in seconds when none is passed.",
							"Choose it longer than the slowest delivery.",
							&outbox_lease_seconds,
							60, OUTBOX_LEASE_SECONDS_MIN, OUTBOX_LEASE_SECONDS_MAX,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.max_attempts",
							"Number of claims after which a failing message is dead.",
							NULL,
							&outbox_max_attempts,
							8, 1, 50,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.backoff_seconds",
							"Delay in seconds before the first retry of a failed message.",
							"Each further failure doubles the delay, up to outbox.backoff_max_seconds.",
							&outbox_backoff_seconds,
							30, 1, 3600,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.backoff_max_seconds",
							"Longest retry delay in seconds.",
							NULL,
							&outbox_backoff_max_seconds,
							3600, 1, 86400,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.retention_days",
							"Age in days after which purge deletes delivered and dead messages.",
							NULL,
							&outbox_retention_days,
							7, 1, 3650,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	/*
	 * Superuser only: purge expires the subscriptions of every role by it,
	 * so a role allowed to purge must not choose it.
	 */
	DefineCustomIntVariable("outbox.subscription_max_lag",
							"Age of its oldest pending message past which purge expires a named subscription.",
							"An expired subscription holds no message back and its claims are refused. 0 turns expiry off.",
							&outbox_subscription_max_lag,
							0, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);

	/* no GUC_UNIT_MS, as for outbox.worker_naptime_ms below */
	DefineCustomIntVariable("outbox.remote_timeout_ms",
							"Longest time in milliseconds a remote route's call may take, connecting included.",
							"A call never gets more than half a lease either.",
							&outbox_remote_timeout_ms,
							10000, 10, OUTBOX_LEASE_SECONDS_MAX * 1000 / 2,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.remote_pause_after",
							"Number of timeouts or connection failures in a row after which a remote route is paused.",
							"The pause lasts outbox.backoff_seconds, doubling with each further one up to outbox.backoff_max_seconds.",
							&outbox_remote_pause_after,
							3, 1, 1000,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	/* as outbox.remote_timeout_ms */
	DefineCustomIntVariable("outbox.http_timeout_ms",
							"Longest time in milliseconds an HTTP route's call may take, connecting included.",
							"A call never gets more than half a lease either.",
							&outbox_http_timeout_ms,
							10000, 10, OUTBOX_LEASE_SECONDS_MAX * 1000 / 2,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	/*
	 * Which addresses HTTP routes may reach is the superuser's to say: the
	 * requests leave from the database server, inside its network.
	 */
	DefineCustomBoolVariable("outbox.http_allow_private",
							 "Lets HTTP routes connect to loopback, private, link-local and metadata addresses.",
							 "Off, such an address is refused unless outbox.http_private_networks holds it.",
							 &outbox_http_allow_private,
							 false,
							 PGC_SUSET, 0,
							 NULL, obx_assign_allow_private, NULL);

	DefineCustomStringVariable("outbox.http_private_networks",
							   "Networks (a comma-separated list of CIDRs) that HTTP routes may reach although they are private.",
							   NULL,
							   &outbox_http_private_networks,
							   "",
							   PGC_SUSET, GUC_LIST_INPUT,
							   obx_check_private_networks, HttpAssignPrivateNetworks, NULL);

	obx_define_worker_settings();
}

/* a change of outbox.http_allow_private: connections kept open are not reused */
static void
obx_assign_allow_private(bool newval, void *extra)
{
	HttpFilterChanged();
}

/* the check of outbox.http_private_networks: outbox_http_addr.c parses it */
static bool
obx_check_private_networks(char **newval, void **extra, GucSource source)
{
	return HttpCheckPrivateNetworks(newval, extra);
}

/*
 * Define the worker settings, and outbox.claim_positions.  Preloaded, the
 * worker settings follow the configuration file (PGC_SIGHUP), and the
 * positions are sized at server start.  Otherwise they have no effect at
 * all; they are then
 * superuser-settable only so that an attempt to set them reaches the check
 * hook, which explains what is missing, instead of a generic "cannot be
 * changed now".
 */
static void
obx_define_worker_settings(void)
{
	GucContext	context = outbox_preloaded ? PGC_SIGHUP : PGC_SUSET;

	/* values met while defining come from postgresql.conf: see the hook */
	obx_defining_settings = true;

	DefineCustomStringVariable("outbox.worker_databases",
							   "Databases where the background worker delivers messages.",
							   "A comma-separated list of database names, or * for every database where the extension is installed; empty: no worker.",
							   &outbox_worker_databases,
							   "",
							   context, GUC_LIST_INPUT,
							   obx_check_databases, NULL, NULL);

	DefineCustomStringVariable("outbox.worker_role",
							   "Role the background workers connect as.",
							   "Empty: the bootstrap superuser.",
							   &outbox_worker_role,
							   "",
							   context, 0,
							   obx_check_role, NULL, NULL);

	/*
	 * No GUC_UNIT_MS: SHOW would print "5s" where the documentation gives
	 * the plain number of milliseconds.
	 */
	DefineCustomIntVariable("outbox.worker_naptime_ms",
							"Longest sleep of a background worker between two rounds, in milliseconds.",
							"A commit that appends messages wakes the worker earlier.",
							&outbox_worker_naptime_ms,
							5000, 10, 3600000,
							context, 0,
							obx_check_naptime, NULL, NULL);

	/*
	 * Sizes the claim positions in shared memory, so it takes effect at
	 * server start only (PostgreSQL lets only a preloaded library define
	 * such a setting; without preloading there is nothing to size).
	 */
	DefineCustomIntVariable("outbox.claim_positions",
							"Number of topics whose claim positions are kept in shared memory.",
							"With more topics claimed at once, the least recently used position makes room, and the next claim of its topic searches it again from the floor saved in outbox.claim_position.",
							&outbox_claim_positions,
							OUTBOX_CLAIM_POSITIONS_DEFAULT, 64, 1048576,
							outbox_preloaded ? PGC_POSTMASTER : PGC_SUSET, 0,
							obx_check_positions, NULL, NULL);

	obx_defining_settings = false;
}

/*
 * Common check of the worker settings: they can only be set when the
 * library is preloaded.  A value from postgresql.conf that a session meets
 * while loading the library is let through quietly, so that a cluster whose
 * configuration names them but does not preload the library keeps working;
 * a later reload of the file rejects it only at DEBUG level.  ALTER SYSTEM
 * validates with the same source as the file, but never while the library
 * is being defined, so it gets the error.
 */
static bool
obx_check_preloaded(const char *name, GucSource source)
{
	if (outbox_preloaded || source == PGC_S_DEFAULT)
		return true;
	if (obx_defining_settings && source == PGC_S_FILE)
		return true;

	GUC_check_errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE);
	GUC_check_errmsg("parameter \"%s\" cannot be set because krizaka_outbox is not preloaded",
					 name);
	GUC_check_errhint("Add %s to %s and restart the server.",
					  OUTBOX_EXTENSION_NAME, "shared_preload_libraries");
	return false;
}

/* outbox.worker_databases: '', '*', or a list of database names. */
static bool
obx_check_databases(char **newval, void **extra, GucSource source)
{
	char	   *raw;
	List	   *names;
	ListCell   *lc;
	bool		ok = true;

	if (!obx_check_preloaded("outbox.worker_databases", source))
		return false;

	raw = pstrdup(*newval);
	if (!SplitGUCList(raw, ',', &names))
	{
		GUC_check_errdetail("List syntax is invalid.");
		pfree(raw);
		return false;
	}
	foreach(lc, names)
	{
		char	   *name = (char *) lfirst(lc);

		if (strlen(name) >= NAMEDATALEN)
		{
			GUC_check_errdetail("Database name \"%s\" is too long.", name);
			ok = false;
			break;
		}
		if (strcmp(name, "*") == 0 && list_length(names) > 1)
		{
			GUC_check_errdetail("\"*\" cannot be combined with database names.");
			ok = false;
			break;
		}
	}
	list_free(names);
	pfree(raw);
	return ok;
}

/* outbox.worker_role: a role name; whether it exists is the launcher's check. */
static bool
obx_check_role(char **newval, void **extra, GucSource source)
{
	if (!obx_check_preloaded("outbox.worker_role", source))
		return false;

	if (strlen(*newval) >= NAMEDATALEN)
	{
		GUC_check_errdetail("Role name is too long.");
		return false;
	}
	return true;
}

/* outbox.claim_positions: range checked by the GUC machinery. */
static bool
obx_check_positions(int *newval, void **extra, GucSource source)
{
	return obx_check_preloaded("outbox.claim_positions", source);
}

/* outbox.worker_naptime_ms: range checked by the GUC machinery. */
static bool
obx_check_naptime(int *newval, void **extra, GucSource source)
{
	return obx_check_preloaded("outbox.worker_naptime_ms", source);
}
