# monitoring/queries.yaml with the real prometheus-postgres-exporter: the
# exporter connects as a role with pg_monitor and the documented monitoring
# grants only, and /metrics shows exactly the messages of two topics in
# every state, the age of their oldest undelivered message, the pause and
# the stop of a route, the counters of an HTTP route's calls, the counts,
# ages and pause of two named subscriptions, the drain
# worker's state and the age of its last error; once the
# server is gone, pg_up is 0.  The exporter is stopped by its pid whatever
# happens.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use HTTP::Tiny;
use POSIX ();
use Time::HiRes qw(time usleep);

my $exporter_bin = '/usr/bin/prometheus-postgres-exporter';
my $queries = "$FindBin::RealBin/../../monitoring/queries.yaml";
ok(-x $exporter_bin, 'prometheus-postgres-exporter is installed')
  or BAIL_OUT('no exporter');

my $node = worker_node('monitoring', 'app');
$node->safe_psql('postgres', 'CREATE DATABASE app');
remote_server($node, 'app', 'inbox', 'postgres');

# The exporter's role: pg_monitor and the monitoring grants of the README.
$node->safe_psql('app', q{
	CREATE ROLE krizaka_exporter LOGIN IN ROLE pg_monitor;
	GRANT USAGE ON SCHEMA outbox TO krizaka_exporter;
	GRANT SELECT ON outbox.topic_stats, outbox.route_http_stats, outbox.subscription_stats
	  TO krizaka_exporter;
	GRANT EXECUTE ON FUNCTION outbox.worker_status() TO krizaka_exporter;
});

# Messages in every state, through the API.  Each claim takes exactly the
# messages appended just before it (the others are not due yet, or taken).
$node->safe_psql('app', q{
	SET outbox.max_attempts = 1;
	CREATE FUNCTION pg_temp.put(topic text, n integer, available timestamptz DEFAULT NULL)
	RETURNS void LANGUAGE sql AS $$
		SELECT outbox.append(topic, 'evt.monitoring.v1', '{}', NULL, available)
		  FROM generate_series(1, n)
	$$;
	-- orders: 2 delivered, 1 dead, 1 leased, 3 due, 2 delayed
	SELECT pg_temp.put('orders', 2);
	SELECT outbox.complete(id, 'w1') FROM outbox.claim('w1', 'orders', 2);
	SELECT pg_temp.put('orders', 1);
	SELECT outbox.fail(id, 'w1', 'HTTP 500') FROM outbox.claim('w1', 'orders', 1);
	SELECT pg_temp.put('orders', 1);
	SELECT count(*) FROM outbox.claim('w1', 'orders', 1, 3600);
	SELECT pg_temp.put('orders', 3);
	SELECT pg_temp.put('orders', 2, now() + interval '1 day');
	-- mail: 1 delivered, 2 dead, 1 due
	SELECT pg_temp.put('mail', 1);
	SELECT outbox.complete(id, 'w2') FROM outbox.claim('w2', 'mail', 1);
	SELECT pg_temp.put('mail', 2);
	SELECT outbox.fail(id, 'w2', 'HTTP 500') FROM outbox.claim('w2', 'mail', 2);
	SELECT pg_temp.put('mail', 1);
});
# The oldest undelivered message of orders was made at 2024-01-01 00:00 UTC,
# that of mail an hour later; mail's remote route is paused for an hour,
# from the same transaction that makes it, so the worker never calls it.
$node->safe_psql('app', q{
	UPDATE outbox.message SET created_at = '2024-01-01 00:00:00+00'
	 WHERE topic = 'orders' AND delivered_at IS NULL AND dead_at IS NULL;
	UPDATE outbox.message SET created_at = '2024-01-01 01:00:00+00'
	 WHERE topic = 'mail' AND delivered_at IS NULL AND dead_at IS NULL;
	BEGIN;
	SELECT outbox.route_remote('mail', 'inbox', 'SELECT $1::text');
	UPDATE outbox.routes SET paused_until = now() + interval '1 hour' WHERE topic = 'mail';
	COMMIT;
});
# Named subscriptions: audit reads every message of orders (the first one
# done, the second leased, 8 pending), replay every message of mail and is
# paused.  Their oldest pending messages are those of the topics.
$node->safe_psql('app', q{
	SELECT outbox.subscribe('orders', 'audit', '-infinity');
	SELECT outbox.complete(id, 'w4', 'audit') FROM outbox.claim('w4', 'orders', 1, NULL, 'audit');
	SELECT count(*) FROM outbox.claim('w4', 'orders', 1, 3600, 'audit');
	SELECT outbox.subscribe('mail', 'replay', '-infinity');
	SELECT outbox.pause('mail', 'replay');
});
# An HTTP route with no message, and its counters as delivery writes them.
$node->safe_psql('app', q{
	SELECT outbox.route_http('hooks', 'https://hooks.example.com/outbox');
	INSERT INTO outbox.route_http_stats VALUES ('hooks', 7, 1, 2, 3, 4, 1.25, 503, 12.5, now())
	    ON CONFLICT (topic, subscription) DO UPDATE SET calls_2xx = 7, calls_3xx = 1, calls_4xx = 2,
	        calls_5xx = 3, calls_failed = 4, latency_seconds_total = 1.25, last_status = 503,
	        last_latency_ms = 12.5, last_call_at = now();
	-- and the counters of a named subscription's HTTP route of the same topic
	-- (kept after its route and subscription went, as counters are)
	INSERT INTO outbox.route_http_stats VALUES ('hooks', 5, 0, 0, 0, 1, 0.5, 200, 3.5, now(), 'mirror')
	    ON CONFLICT (topic, subscription) DO UPDATE SET calls_2xx = 5, calls_3xx = 0, calls_4xx = 0,
	        calls_5xx = 0, calls_failed = 1, latency_seconds_total = 0.5, last_status = 200,
	        last_latency_ms = 3.5, last_call_at = now();
});
is($node->safe_psql('app', q{SELECT string_agg(format('%s:%s/%s/%s/%s/%s', topic, due, delayed, leased, dead, delivered), ' ' ORDER BY topic) FROM outbox.topic_stats}),
	'mail:1/0/0/2/1 orders:3/2/1/1/2', 'the messages are in their states');

# The exporter, as this user (postgres), on a port of its own.
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $log = $node->basedir . '/exporter.log';
my $dsn = sprintf('host=%s port=%d user=krizaka_exporter dbname=app sslmode=disable',
	$node->host, $node->port);
my $exporter = fork();
die "fork: $!" unless defined $exporter;
if ($exporter == 0)
{
	open STDOUT, '>', $log or POSIX::_exit(1);
	open STDERR, '>&', \*STDOUT or POSIX::_exit(1);
	$ENV{DATA_SOURCE_NAME} = $dsn;
	exec($exporter_bin, "--web.listen-address=127.0.0.1:$port",
		"--extend.query-path=$queries")
	  or POSIX::_exit(1);
}
END
{
	if ($exporter)
	{
		kill 'TERM', $exporter;
		waitpid($exporter, 0);
	}
}

my $http = HTTP::Tiny->new(timeout => 10, no_proxy => ['127.0.0.1']);

# One scrape: { 'name{label="value",...}' => value }, labels in name order
# (the server label, which the exporter adds, left out).
sub scrape
{
	my $res = $http->get("http://127.0.0.1:$port/metrics");
	return undef unless $res->{success};
	my %m;
	for my $line (split /\n/, $res->{content})
	{
		next if $line =~ /^#/ || $line !~ /\S/;
		my ($name, $labels, $value) = $line =~ /^(\w+)(?:\{(.*)\})? (\S+)$/
		  or die "unparsed metrics line: $line";
		my @l = grep { !/^server=/ } ($labels // '') =~ /(\w+="(?:[^"\\]|\\.)*")/g;
		$m{ $name . (@l ? '{' . join(',', sort @l) . '}' : '') } = $value;
	}
	return \%m;
}

# The series of a metric: { 'labels' => value }.
sub series
{
	my ($m, $name) = @_;
	my %s;
	for my $k (keys %$m)
	{
		$s{ $1 // '' } = $m->{$k} + 0 if $k =~ /^\Q$name\E(?:\{(.*)\})?$/;
	}
	return \%s;
}

# Scrape until $cond holds for a scrape (at most 60 s); returns that scrape
# with the server's clock read just before and after it.
sub scrape_until
{
	my ($cond, $what) = @_;
	my $until = time() + 60;
	my ($m, $t1, $t2);
	while (time() < $until)
	{
		$t1 = $node->safe_psql('app', 'SELECT extract(epoch FROM clock_timestamp())');
		$m = scrape();
		$t2 = $node->safe_psql('app', 'SELECT extract(epoch FROM clock_timestamp())');
		return ($m, $t1, $t2) if $m && $cond->($m);
		usleep(200_000);
	}
	fail($what);
	diag(-s $log ? slurp_file($log) : 'the exporter wrote nothing');
	return ($m // {}, $t1, $t2);
}

sub worker_in
{
	my ($state) = @_;
	return sub { ($_[0]{qq{krizaka_outbox_worker_status{datname="app",state="$state"}}} // 0) == 1 };
}

my @states = ('due', 'delayed', 'leased', 'dead', 'delivered');
my @worker_states = ('starting', 'running', 'sleeping', 'waiting for replication', 'no extension',
	'stopped', 'standby');

sub worker_series
{
	my ($current) = @_;
	return { map { (qq{datname="app",state="$_"} => ($_ eq $current ? 1 : 0)) } @worker_states };
}

# 1. A healthy outbox.
my ($m, $t1, $t2) = scrape_until(worker_in('sleeping'), 'the exporter shows the worker sleeping');
is($m->{pg_up}, 1, 'pg_up is 1');
is($m->{pg_exporter_last_scrape_error}, 0, 'every query of the file runs with the grants of the exporter\'s role');
my ($load) = grep { /^pg_exporter_user_queries_load_error\{/ } keys %$m;
is($m->{$load}, 0, 'the query file loads');

my %expected = (orders => [3, 2, 1, 1, 2], mail => [1, 0, 0, 2, 1]);
is_deeply(
	series($m, 'krizaka_outbox_messages'),
	{
		map {
			my $topic = $_;
			map { (qq{datname="app",state="$states[$_]",topic="$topic"} => $expected{$topic}[$_]) } 0 .. 4
		} keys %expected
	},
	'krizaka_outbox_messages: each topic in each state, exactly');

my $age = series($m, 'krizaka_outbox_topic_oldest_undelivered_age_seconds');
is_deeply([ sort keys %$age ], [ 'datname="app",topic="mail"', 'datname="app",topic="orders"' ],
	'an oldest undelivered age per topic');
my $epoch = 1704067200;    # 2024-01-01 00:00:00 UTC
my $orders = $age->{'datname="app",topic="orders"'};
my $mail = $age->{'datname="app",topic="mail"'};
ok($orders >= $t1 - $epoch - 0.001 && $orders <= $t2 - $epoch + 0.001,
	"orders: the age is the scrape's time minus the oldest created_at ($orders in [" . ($t1 - $epoch) . ', ' . ($t2 - $epoch) . '])');
ok(abs($orders - $mail - 3600) < 0.001, 'mail: an hour younger');

is_deeply(
	series($m, 'krizaka_outbox_topic_route_paused'),
	{ 'datname="app",topic="mail"' => 1, 'datname="app",topic="orders"' => 0 },
	'krizaka_outbox_topic_route_paused: mail\'s route is paused, orders has none');
is_deeply(
	series($m, 'krizaka_outbox_topic_route_stopped'),
	{ 'datname="app",topic="mail"' => 0, 'datname="app",topic="orders"' => 0 },
	'krizaka_outbox_topic_route_stopped: no route is stopped');
is_deeply(
	series($m, 'krizaka_outbox_http_calls_total'),
	{
		'class="2xx",datname="app",subscription="",topic="hooks"' => 7,
		'class="3xx",datname="app",subscription="",topic="hooks"' => 1,
		'class="4xx",datname="app",subscription="",topic="hooks"' => 2,
		'class="5xx",datname="app",subscription="",topic="hooks"' => 3,
		'class="failed",datname="app",subscription="",topic="hooks"' => 4,
		'class="2xx",datname="app",subscription="mirror",topic="hooks"' => 5,
		'class="3xx",datname="app",subscription="mirror",topic="hooks"' => 0,
		'class="4xx",datname="app",subscription="mirror",topic="hooks"' => 0,
		'class="5xx",datname="app",subscription="mirror",topic="hooks"' => 0,
		'class="failed",datname="app",subscription="mirror",topic="hooks"' => 1,
	},
	'krizaka_outbox_http_calls_total: each HTTP route\'s calls by class, the default subscription\'s with an empty subscription (no label once in Prometheus)');
is_deeply(series($m, 'krizaka_outbox_http_latency_seconds_total'),
	{ 'datname="app",subscription="",topic="hooks"' => 1.25, 'datname="app",subscription="mirror",topic="hooks"' => 0.5 },
	'krizaka_outbox_http_latency_seconds_total: the time their calls took');
my $audit = 'datname="app",subscription="audit",topic="orders"';
my $replay = 'datname="app",subscription="replay",topic="mail"';
is_deeply(
	{ map { ($_ => series($m, "krizaka_outbox_subscription_$_")) } qw(pending in_flight dead paused) },
	{
		pending => { $audit => 8, $replay => 4 },
		in_flight => { $audit => 1, $replay => 0 },
		dead => { $audit => 0, $replay => 0 },
		paused => { $audit => 0, $replay => 1 },
	},
	'krizaka_outbox_subscription_*: each named subscription, exactly');
my $sage = series($m, 'krizaka_outbox_subscription_oldest_pending_age_seconds');
is_deeply([ sort keys %$sage ], [ $audit, $replay ], 'an oldest pending age per named subscription');
ok(($sage->{$audit} // -1) >= $t1 - $epoch - 0.001 && ($sage->{$audit} // -1) <= $t2 - $epoch + 0.001,
	'audit: the age of the oldest message of orders it has not finished ('
	  . ($sage->{$audit} // 'none') . ')');
ok(abs(($sage->{$audit} // 0) - ($sage->{$replay} // 0) - 3600) < 0.001,
	'replay: that of mail, an hour younger');
is_deeply(series($m, 'krizaka_outbox_worker_status'), worker_series('sleeping'),
	'krizaka_outbox_worker_status: the worker sleeps, one series per state');
is_deeply(series($m, 'krizaka_outbox_worker_last_error_age_seconds'), {},
	'no last error, no krizaka_outbox_worker_last_error_age_seconds');

# A message delivered and the route resumed: the numbers follow.
$node->safe_psql('app', q{
	SELECT outbox.complete(id, 'w3') FROM outbox.claim('w3', 'orders', 1);
	UPDATE outbox.routes SET paused_until = NULL WHERE topic = 'mail';
});
($m) = scrape_until(
	sub { ($_[0]{'krizaka_outbox_messages{datname="app",state="delivered",topic="orders"}'} // 0) == 3 },
	'the exporter shows the new delivery');
is_deeply(
	[ map { $m->{qq{krizaka_outbox_messages{datname="app",state="$_",topic="orders"}}} } @states ],
	[ 2, 2, 1, 1, 3 ], 'orders: one due message less, one delivered more');
is($m->{'krizaka_outbox_topic_route_paused{datname="app",topic="mail"}'}, 0, 'mail\'s route is no longer paused');

# A route paused until infinity, as a 410 stops an HTTP route.
$node->safe_psql('app', q{UPDATE outbox.routes SET paused_until = 'infinity' WHERE topic = 'mail'});
($m) = scrape_until(
	sub { ($_[0]{'krizaka_outbox_topic_route_stopped{datname="app",topic="mail"}'} // 0) == 1 },
	'the exporter shows the stopped route');
is($m->{'krizaka_outbox_topic_route_paused{datname="app",topic="mail"}'}, 1, 'a stopped route is paused too');
is($m->{'krizaka_outbox_topic_route_stopped{datname="app",topic="orders"}'}, 0, 'and orders has none');
$node->safe_psql('app', q{UPDATE outbox.routes SET paused_until = NULL WHERE topic = 'mail'});

# 2. A worker role that does not exist: no worker runs; the error is current.
$node->safe_psql('postgres', q{ALTER SYSTEM SET outbox.worker_role = 'no_such_role'});
$node->reload;
ok(wait_for($node, 'app', q{SELECT state || ': ' || last_error FROM outbox.worker_status()},
		'stopped: role "no_such_role" named in outbox.worker_role does not exist', 30),
	'worker_status() shows the worker stopped by its role');
($m) = scrape_until(worker_in('stopped'), 'the exporter shows the worker stopped');
is_deeply(series($m, 'krizaka_outbox_worker_status'), worker_series('stopped'),
	'krizaka_outbox_worker_status: stopped');
is_deeply(series($m, 'krizaka_outbox_worker_last_error_age_seconds'), { 'datname="app"' => 0 },
	'krizaka_outbox_worker_last_error_age_seconds is 0 while no worker runs');

# 3. A worker that fails to connect, then is let in: it runs again, with
# its last error kept, and the age counts from its start.
$node->safe_psql('postgres', q{
	CREATE ROLE outbox_runner LOGIN;
	REVOKE CONNECT ON DATABASE app FROM PUBLIC;
	GRANT CONNECT ON DATABASE app TO krizaka_exporter;
	ALTER SYSTEM SET outbox.worker_role = 'outbox_runner';
});
$node->reload;
ok(wait_for($node, 'app', q{SELECT state || ': ' || last_error FROM outbox.worker_status()},
		'stopped: permission denied for database "app"', 30),
	'the worker fails to connect');
$node->safe_psql('postgres', 'GRANT CONNECT ON DATABASE app TO outbox_runner');
ok(wait_for($node, 'app', q{SELECT state || '/' || (pid IS NOT NULL) FROM outbox.worker_status()},
		'sleeping/true', 30),
	'the worker runs again');
my $started = $node->safe_psql('app', 'SELECT extract(epoch FROM started_at) FROM outbox.worker_status()');
($m, $t1, $t2) = scrape_until(worker_in('sleeping'), 'the exporter shows the worker sleeping again');
is_deeply(series($m, 'krizaka_outbox_worker_status'), worker_series('sleeping'),
	'krizaka_outbox_worker_status: sleeping');
my $error_age = series($m, 'krizaka_outbox_worker_last_error_age_seconds')->{'datname="app"'};
ok(defined $error_age && $error_age >= $t1 - $started - 0.001 && $error_age <= $t2 - $started + 0.001,
	'krizaka_outbox_worker_last_error_age_seconds counts from the restart ('
	  . ($error_age // 'none') . ' in [' . ($t1 - $started) . ', ' . ($t2 - $started) . '])');

# 4. The server goes away: pg_up is 0, which KrizakaOutboxExporterDown
# watches.
$node->stop;
my $until = time() + 60;
my $up;
while (time() < $until)
{
	$m = scrape();
	$up = $m ? $m->{pg_up} : undef;
	last if defined $up && $up == 0;
	usleep(200_000);
}
is($up, 0, 'pg_up is 0 once the server is down');
ok(!grep({ /^krizaka_outbox_/ } keys %{ $m // {} }), 'and no outbox metric is left');

kill 'TERM', $exporter;
is(waitpid($exporter, 0), $exporter, 'the exporter stops on SIGTERM');
$exporter = 0;

done_testing();
