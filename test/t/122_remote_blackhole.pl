# A remote route whose network path turns into a black hole never blocks
# the worker.  The route's server is reached through a loopback proxy that
# relays its first connection to the real remote cluster and accepts every
# later one without ever answering: the command of the first call hangs
# past its deadline, and a cancel request (a connection of its own, to the
# same address) would then wait for ever for an answer, as it would towards
# an address that drops packets; every reconnection hangs the same way.
# Meanwhile a NOTIFY topic keeps its latency, the remote statement ends
# when its client is gone (client_connection_check_interval on the remote
# server), and a fast shutdown finishes within 5 s.
use strict;
use warnings;
use File::Temp;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $far = PostgreSQL::Test::Cluster->new('far');
$far->init;
$far->append_conf('postgresql.conf', "client_connection_check_interval = '100ms'\n");
$far->start;

# The proxy: relays its first connection to far's socket, holds the rest.
my $dir = File::Temp->newdir;
my $pport = PostgreSQL::Test::Cluster::get_free_port();
my $far_socket = $far->host . '/.s.PGSQL.' . $far->port;
open my $src, '>', "$dir/proxy.pl" or die $!;
print $src <<'PROXY';
use strict;
use warnings;
use IO::Socket::INET;
use IO::Socket::UNIX;
use IO::Select;
my ($port, $target) = @ARGV;
my $listener = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $port,
	Listen => 16, ReuseAddr => 1) or die "listen: $!";
$SIG{CHLD} = 'IGNORE';
$| = 1;
print "ready\n";
my (@held, $n);
while (my $client = $listener->accept)
{
	if (++$n > 1)
	{
		push @held, $client;	# accepted, never answered
		next;
	}
	my $pid = fork;
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		my $server = IO::Socket::UNIX->new(Peer => $target) or die "connect: $!";
		my $sel = IO::Select->new($client, $server);
		while (1)
		{
			for my $s ($sel->can_read)
			{
				my $r = sysread($s, my $buf, 65536);
				exit 0 unless $r;
				syswrite($s == $client ? $server : $client, $buf);
			}
		}
	}
	close $client;
}
PROXY
close $src;
my ($pout, $perr) = ('', '');
my $proxy = IPC::Run::start([ $^X, "$dir/proxy.pl", $pport, $far_socket ], '>', \$pout, '2>', \$perr);
$proxy->pump until $pout =~ /ready/;

my $node = worker_node('near', 'app', qq{
outbox.backoff_seconds = 1
outbox.remote_timeout_ms = 1000
});
$node->safe_psql('postgres', 'CREATE DATABASE app');
my $su = $node->safe_psql('postgres', 'SELECT current_user');
$node->safe_psql('app', qq{
	CREATE EXTENSION krizaka_outbox;
	CREATE EXTENSION dblink;
	CREATE SERVER hole FOREIGN DATA WRAPPER dblink_fdw OPTIONS (hostaddr '127.0.0.1', port '$pport', dbname 'postgres');
	CREATE USER MAPPING FOR $su SERVER hole;
	SELECT outbox.route_remote('slow', 'hole', 'SELECT pg_sleep(60) WHERE \$1 IS NOT NULL');
	SELECT outbox.route_notify('live', 'live_events');
});
ok($node->poll_query_until('app',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'}),
	'the worker of app runs');
my $wpid = $node->safe_psql('app',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'});

# The first call runs its command on far, through the proxy, and hangs.
$node->safe_psql('app', q{SELECT outbox.append('slow', 'evt.slow.v1', '{}')});
ok(wait_for($far, 'postgres',
	q{SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(60)%' AND state = 'active'}, '1', 10),
	'the remote command runs');
ok(wait_for($node, 'app', q{SELECT attempts = 1 AND last_error LIKE '57014: remote command timed out after % ms on server "hole"'
	FROM outbox.message WHERE topic = 'slow'}, 't', 10),
	'the call timed out at its deadline');
ok(wait_for($far, 'postgres',
	q{SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(60)%' AND state = 'active'}, '0', 5),
	'the remote statement ended when its connection was closed');

# The route retries into the black hole: each attempt times out at its
# connection deadline, and the NOTIFY topic does not wait for them.
ok(wait_for($node, 'app', q{SELECT attempts >= 2 AND last_error LIKE '08001: connection to server "hole" timed out after%'
	FROM outbox.message WHERE topic = 'slow'}, 't', 15),
	'the reconnections time out too');
my $listener = $node->background_psql('app');
$listener->query_safe('LISTEN live_events');
for my $n (1 .. 10)
{
	$node->safe_psql('app', "SELECT outbox.append('live', 'evt.live.v1', '{\"n\": $n}')");
	wait_for($node, 'app', q{SELECT count(*) FROM outbox.message WHERE topic = 'live' AND delivered_at IS NULL}, '0', 10);
	select(undef, undef, undef, 0.15);	# spread them over the remote attempts
}
my $lat = $node->safe_psql('app', q{SELECT count(*), max(extract(epoch FROM delivered_at - created_at) * 1000)::int
	FROM outbox.message WHERE topic = 'live' AND delivered_at IS NOT NULL});
my ($count, $max_ms) = split /\|/, $lat;
is($count, '10', 'every NOTIFY message was delivered while the remote route hung');
cmp_ok($max_ms, '<', 200, "and within 200 ms of its commit (the slowest took $max_ms ms)");
like($listener->query_safe('SELECT 1'), qr/Asynchronous notification "live_events"/, 'the listener heard them');
$listener->quit;
is($node->safe_psql('app',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'}),
	$wpid, 'the same worker process throughout');
ok(wait_for($node, 'app', q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'
	AND wait_event IS NOT NULL}, '1', 5), 'the worker waits, it does not block');

# A fast shutdown while a connection into the black hole is pending.
$node->safe_psql('app', q{UPDATE outbox.message SET available_at = now() WHERE topic = 'slow' AND delivered_at IS NULL AND dead_at IS NULL});
local $ENV{PGCTLTIMEOUT} = 30;
my $t0 = time();
$node->stop('fast', fail_ok => 1);
my $took = time() - $t0;
cmp_ok($took, '<', 5, sprintf('fast shutdown finished in %.2f s', $took));

$proxy->kill_kill;
$far->stop;
done_testing();
