# drain_once and purge scheduled by the real pg_cron: the jobs run, deliver
# and purge, and the run history is kept in check by the recipe the README
# gives.  pg_cron schedules by the minute, so this test waits for the next
# minute boundary (at most a minute).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('cron');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'pg_cron,krizaka_outbox'
cron.database_name = 'postgres'
cron.use_background_workers = on
max_worker_processes = 16
});
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_cron;
	CREATE EXTENSION krizaka_outbox;
	SELECT outbox.route_notify('credits', 'credits_events');
	-- a message appended and delivered a month ago (before the others), which
	-- purge removes
	SELECT outbox.append('credits', 'evt.old.v1', '{}', '01890a5d-ac96-774b-bcce-b302099a8000');
	UPDATE outbox.message SET created_at = now() - interval '31 days',
	       delivered_at = now() - interval '30 days', attempts = 1
	 WHERE id = '01890a5d-ac96-774b-bcce-b302099a8000';
	SELECT outbox.append('credits', 'evt.x.v1', jsonb_build_object('n', g)) FROM generate_series(1, 3) g;
	-- an old run-history row that the cleanup job removes
	INSERT INTO cron.job_run_details (jobid, runid, job_pid, database, username, command, status, start_time, end_time)
	VALUES (0, 0, 0, 'postgres', 'postgres', 'SELECT 1', 'succeeded', now() - interval '30 days', now() - interval '30 days');
});

# The README's recipes (every minute here instead of their usual times).
$node->safe_psql('postgres', q{
	SELECT cron.schedule('outbox-drain', '* * * * *', 'SELECT outbox.drain_once()');
	SELECT cron.schedule('outbox-purge', '* * * * *', 'SELECT outbox.purge()');
	SELECT cron.schedule('cron-history-cleanup', '* * * * *',
		$$DELETE FROM cron.job_run_details WHERE end_time < now() - interval '7 days'$$);
});

ok($node->poll_query_until('postgres', q{
	SELECT count(DISTINCT j.jobname) = 3
	  FROM cron.job_run_details d JOIN cron.job j USING (jobid)
	 WHERE d.status = 'succeeded'
}), 'the three scheduled jobs ran and succeeded');

is($node->safe_psql('postgres', q{
	SELECT d.return_message FROM cron.job_run_details d JOIN cron.job j USING (jobid)
	 WHERE j.jobname = 'outbox-drain' AND d.status = 'succeeded' ORDER BY d.start_time LIMIT 1
}), 'SELECT 1', 'the drain job ran its SELECT');
is($node->safe_psql('postgres',
	q{SELECT count(*) FILTER (WHERE delivered_at IS NOT NULL), count(*) FROM outbox.message}),
	'3|3', 'the scheduled drain delivered every message and purge removed the old one');
is($node->safe_psql('postgres',
	q{SELECT count(*) FROM cron.job_run_details WHERE end_time < now() - interval '7 days'}),
	'0', 'the history cleanup removed old run records');

$node->stop;
done_testing();
