# krizaka_outbox: PGXS build and test entry points

EXTENSION = krizaka_outbox
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" $(EXTENSION).control)

MODULE_big = krizaka_outbox
OBJS = \
	src/krizaka_outbox.o \
	src/outbox_api.o \
	src/outbox_api_http.o \
	src/outbox_api_routes.o \
	src/outbox_api_subs.o \
	src/outbox_backoff.o \
	src/outbox_claim_hint.o \
	src/outbox_claim_sink.o \
	src/outbox_drain.o \
	src/outbox_drain_batch.o \
	src/outbox_drain_call.o \
	src/outbox_drain_outcomes.o \
	src/outbox_drain_pace.o \
	src/outbox_drain_remote.o \
	src/outbox_drain_wait.o \
	src/outbox_drain_xact.o \
	src/outbox_envelope.o \
	src/outbox_error.o \
	src/outbox_gap.o \
	src/outbox_guc.o \
	src/outbox_http_addr.o \
	src/outbox_http_call.o \
	src/outbox_http_conn.o \
	src/outbox_http_sign.o \
	src/outbox_identity.o \
	src/outbox_key_lock.o \
	src/outbox_launcher.o \
	src/outbox_launcher_dbs.o \
	src/outbox_notify.o \
	src/outbox_remote_check.o \
	src/outbox_remote_command.o \
	src/outbox_remote_conn.o \
	src/outbox_remote_errors.o \
	src/outbox_remote_options.o \
	src/outbox_remote_probe.o \
	src/outbox_shmem.o \
	src/outbox_shmem_backend.o \
	src/outbox_spi.o \
	src/outbox_spi_check.o \
	src/outbox_store.o \
	src/outbox_store_append.o \
	src/outbox_store_across.o \
	src/outbox_store_claim.o \
	src/outbox_store_position.o \
	src/outbox_store_saved.o \
	src/outbox_store_http.o \
	src/outbox_store_purge.o \
	src/outbox_store_routes.o \
	src/outbox_store_subs.o \
	src/outbox_store_subs_claim.o \
	src/outbox_store_subs_due.o \
	src/outbox_store_subs_holes.o \
	src/outbox_subs_across.o \
	src/outbox_subs_frontier.o \
	src/outbox_subs_keylock.o \
	src/outbox_subs_manage.o \
	src/outbox_subs_hints.o \
	src/outbox_subs_lease.o \
	src/outbox_subs_memo.o \
	src/outbox_subs_promote.o \
	src/outbox_subs_marks.o \
	src/outbox_subs_fresh.o \
	src/outbox_subs_scan.o \
	src/outbox_subs_sink.o \
	src/outbox_stream.o \
	src/outbox_stream_across.o \
	src/outbox_uuid.o \
	src/outbox_validate.o \
	src/outbox_wakeup.o \
	src/outbox_worker.o \
	src/outbox_worker_status.o

DATA = $(wildcard $(EXTENSION)--*.sql)
PGFILEDESC = "krizaka_outbox - transactional outbox"

# -Werror is not forced here (a newer compiler's new warnings would stop a
# user's build); test/run, and so make test and CI, build with COPT=-Werror.
PG_CPPFLAGS = -I$(libpq_srcdir) -Wall
# HTTP routes call their endpoints with libcurl (7.85 or later is best).  In
# the _INTERNAL list, which a SHLIB_LINK given on the command line (make
# sanitize gives one) does not replace.
SHLIB_LINK_INTERNAL = $(libpq) $(shell curl-config --libs 2>/dev/null || echo -lcurl)

# pg_regress: sql/*.sql against expected/*.out, in this order
REGRESS = $(shell cat test/regress_schedule)
REGRESS_OPTS = --load-extension=$(EXTENSION)

# isolation specs live under test/isolation/{specs,expected}
ISOLATION = $(shell cat test/isolation_schedule)
ISOLATION_OPTS = --inputdir=test/isolation --load-extension=$(EXTENSION)

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

EXTRA_CLEAN = results regression.diffs regression.out output_iso tmp_check tmp_check_iso log

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# The version lives in the control file; META.json and the changelog must agree.
all: check-version
.PHONY: check-version test demo bench deb-check sanitize valgrind
check-version:
	@grep -q '"version": "$(EXTVERSION).0"' META.json || \
		{ echo "META.json does not carry version $(EXTVERSION).0 (the semver of version $(EXTVERSION) in) $(EXTENSION).control" >&2; exit 1; }
	@grep -q '^## $(EXTVERSION)' CHANGELOG.md || \
		{ echo "CHANGELOG.md has no section for version $(EXTVERSION)" >&2; exit 1; }
	@test -f $(EXTENSION)--$(EXTVERSION).sql || \
		{ echo "$(EXTENSION)--$(EXTVERSION).sql is missing" >&2; exit 1; }

# Everything from a fresh Debian 12 machine, as root: see test/run
test:
	bash test/run

demo:
	bash test/run --demo

# The benchmark on a throwaway cluster, as root: see bench/run
bench:
	bash bench/run

# Build the Debian package and run the suites against what it installs
deb-check:
	bash test/run --deb

# every suite with the extension built with UndefinedBehaviorSanitizer, its
# runtime loaded into every server process; the first report fails the run
sanitize:
	bash test/run --sanitize

# regress, isolation and pgTAP with every server process under valgrind's
# memcheck; fails on an error in a frame of the extension
valgrind:
	bash test/run --valgrind
