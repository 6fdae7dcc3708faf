# One message fails alone, and delivery's memory stays bounded, with real
# payloads against a real cluster: a message whose envelope cannot be a
# jsonb value (a 268 MB payload) fails by itself on a remote route, in the
# worker and in drain_once, while its neighbours are delivered once each, in
# order; ten 50 MB payloads go out truncated on a NOTIFY route without being
# detoasted; a remote command that returns a million rows, and a remote
# batch of 20 MB payloads, keep the worker under its documented bound (the
# README's "Memory"); and the text of a delivered envelope is exactly the
# text of its jsonb, up to the last byte a notification can carry.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

# The documented bound of the worker's private memory, in kB: 64 MB, plus
# while a message is sent to a remote server, its payload, its envelope's
# text and libpq's copy of that text.
my $bound_kb = 64 * 1024;

# Three attempts a second or two apart, a lease that a 20 MB message fits
# in, and few shared pages, which the measure of private memory counts
# against it.
my $node = worker_node('poison', 'app', q{
outbox.max_attempts = 3
outbox.backoff_seconds = 1
outbox.lease_seconds = 30
shared_buffers = 16MB
});

# sink: the remote database.  app: served by the worker.  manual: no worker,
# delivered by drain_once alone.
$node->safe_psql('postgres', 'CREATE EXTENSION krizaka_outbox');    # for worker_status()
$node->safe_psql('postgres', 'CREATE DATABASE sink');
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'CREATE DATABASE manual');
$node->safe_psql('sink', q{
	CREATE TABLE received (seq bigserial, id uuid, topic text, n int);
	CREATE TABLE big_received (id uuid, len int);
});
my $insert = q{INSERT INTO public.received (id, topic, n) VALUES (($1->>'id')::uuid, $2, ($1->'payload'->>'n')::int)};
for my $db ('app', 'manual')
{
	remote_server($node, $db, 'sink', 'sink');
	$node->safe_psql($db, "SELECT outbox.route_remote('orders_$db', 'sink', " . lit($insert) . ')');
}
ok($node->poll_query_until('app',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'}),
	'the worker of app runs');

# The memory of process $pid from /proc/<pid>/status, in kB.
sub memory
{
	my ($pid) = @_;
	my %m;
	open my $f, '<', "/proc/$pid/status" or die "/proc/$pid/status: $!";
	while (<$f>)
	{
		$m{$1} = $2 if /^(\w+):\s+(\d+) kB/;
	}
	close $f;
	return \%m;
}

# Start measuring the peak private memory of $pid: reset its peak resident
# set size (VmHWM) to the current one (clear_refs 5), and note the file and
# shared pages it has mapped.
sub peak_start
{
	my ($pid) = @_;
	open my $f, '>', "/proc/$pid/clear_refs" or die "/proc/$pid/clear_refs: $!";
	print $f "5";
	close $f;
	return memory($pid);
}

# The peak private memory (RssAnon) of $pid since peak_start, in kB, from
# above.  The kernel keeps the peak only of the whole resident set, VmHWM =
# RssAnon + RssFile + RssShmem at its peak; file and shared pages, once
# mapped, stay mapped here (no swap, no memory pressure), so subtracting
# those mapped at the start can only overstate the private part, by the
# file and shared pages touched since (shared_buffers is 16 MB).  Sampling
# RssAnon instead would miss a short peak.
sub peak_private
{
	my ($pid, $start) = @_;
	my $now = memory($pid);
	my $peak = $now->{VmHWM} - $start->{RssFile} - $start->{RssShmem};
	diag(sprintf('worker %d: peak private memory at most %.1f MB (RssAnon %.1f MB before, %.1f MB now)',
			$pid, $peak / 1024, $start->{RssAnon} / 1024, $now->{RssAnon} / 1024));
	return $peak;
}

# Run $query in the background psql $session, and return the payloads of
# the next $count notifications on $channel that it receives, in order.
sub notifications
{
	my ($session, $query, $channel, $count) = @_;
	my $received = $session->query_safe($query);
	my @payloads;
	my $until = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $until)
	{
		@payloads = ($received =~ /Asynchronous notification "$channel" with payload "(.*)" received from server process/g);
		last if @payloads >= $count;
		select(undef, undef, undef, 0.05);
		$received .= $session->query_safe('SELECT 1');
	}
	return @payloads;
}

# The four messages of one transaction, the third a poison: its payload is
# stored (compressed), but its envelope would exceed jsonb's 256 MB.
sub append_with_poison
{
	my ($db, $topic, $tag) = @_;
	my @id = map { sprintf('01890a5d-ac96-774b-bcce-%012d', 10 * $tag + $_) } 1 .. 4;
	$node->safe_psql($db, qq{
		BEGIN;
		SELECT outbox.append('$topic', 'evt.order.v1', '{"n": 1}', '$id[0]');
		SELECT outbox.append('$topic', 'evt.order.v1', '{"n": 2}', '$id[1]');
		SELECT outbox.append('$topic', 'evt.order.v1', to_jsonb(repeat('a', 268435400)), '$id[2]');
		SELECT outbox.append('$topic', 'evt.order.v1', '{"n": 4}', '$id[3]');
		COMMIT;
	});
	return $id[2];
}

# Append $count compressible payloads of $bytes bytes to $topic in app, in
# one transaction; true once the worker has delivered them all.
sub deliver_large
{
	my ($topic, $count, $bytes) = @_;
	$node->safe_psql('app', qq{
		SELECT count(outbox.append('$topic', 'evt.large.v1', to_jsonb(repeat(chr(96 + g), $bytes))))
		  FROM generate_series(1, $count) g});
	return wait_for($node, 'app',
		"SELECT count(*) FROM outbox.message WHERE topic = '$topic' AND delivered_at IS NOT NULL",
		$count, 60);
}

my $poison_error = "54000: envelope would exceed the maximum size of a jsonb value\n"
  . "DETAIL: The payload takes 268435408 bytes; the contents of a jsonb object may take at most 268435455 bytes.";

# 1. The text of an envelope is the text of its jsonb, byte for byte, and
# the whole envelope goes out exactly while its text fits in a
# notification (7999 bytes), escapes counted.
my $listener = $node->background_psql('manual');
$listener->query_safe(q{LISTEN shapes_events; SELECT outbox.route_notify('shapes', 'shapes_events')});
my @shapes = (
	q{'{"s": "quote \" backslash \\\\ slash / tab \t nl \n cr \r bs \b ff \f c \u0001 \u001f del \u007f é ☃ 😀"}'},
	q{'[1, -2.50, 1e-7, 123456789012345678901234567890.000001, 0, -0, 0.000, 1E+3]'},
	q{'"a raw string"'}, q{'12.5'}, q{'true'}, q{'null'}, q{'[]'}, q{'{}'},
	q{'[[], {}, [{}], {"a": []}, [[null]]]'},
	q{'{"a": {"bb": {"c": [1, {"d": null, "": ""}]}}, "": "", "zzz": false}'},
	q{to_jsonb(10::numeric ^ 300)},
	q{jsonb_build_object('k' || chr(1), chr(9) || 'v')},
);
$node->safe_psql('manual', join("\n",
	map { "SELECT outbox.append('shapes', 'evt.shape.v1', $shapes[$_]);" } 0 .. $#shapes));
my @sent = notifications($listener, q{SELECT outbox.drain_once('shapes')}, 'shapes_events', scalar(@shapes));
my $expected = $node->safe_psql('manual',
	q{SELECT string_agg(outbox.envelope(m)::text, E'\n' ORDER BY available_at, id) FROM outbox.message m WHERE topic = 'shapes'});
is(join("\n", @sent), $expected, 'every shape of payload is sent as the text of its jsonb envelope');

# At the limit: an envelope of exactly 7999 bytes goes whole, one of 8000
# goes truncated; the same with a string of control characters, each
# escaped into six bytes.
$node->safe_psql('manual', q{
	CREATE FUNCTION sized(prefix text, total int) RETURNS jsonb LANGUAGE sql AS $$
		SELECT jsonb_build_object('s', prefix || repeat('x', total - length(
			jsonb_build_object('id', '01890a5d-ac96-774b-bcce-b302099a8000', 'type', 'evt.shape.v1',
				'payload', jsonb_build_object('s', prefix), 'occurredAt', '2026-01-01T00:00:00.000Z')::text)))
	$$;
	SELECT outbox.append('shapes', 'evt.shape.v1', sized('', 7999));
	SELECT outbox.append('shapes', 'evt.shape.v1', sized('', 8000));
	SELECT outbox.append('shapes', 'evt.shape.v1', sized(repeat(chr(1), 1200), 7999));
	SELECT outbox.append('shapes', 'evt.shape.v1', sized(repeat(chr(1), 1200), 8000));
});
@sent = notifications($listener, q{SELECT outbox.drain_once('shapes')}, 'shapes_events', 4);
is(join(' ', map { /"truncated": true/ ? 'truncated' : length($_) } @sent),
	'7999 truncated 7999 truncated', '7999 bytes go whole, 8000 truncated, escapes counted');
$listener->quit;

# 2. On a remote route, through the worker: the poison fails alone.
my $pid = worker_pid($node, 'app');
my $start = peak_start($pid);
my $poison = append_with_poison('app', 'orders_app', '1');
ok(wait_for($node, 'app', "SELECT dead_at IS NOT NULL FROM outbox.message WHERE id = '$poison'", 't', 60),
	'the poison message ends dead');
is($node->safe_psql('app', "SELECT attempts, delivered_at IS NULL, last_error FROM outbox.message WHERE id = '$poison'"),
	"3|t|$poison_error", 'after max_attempts attempts, with its error');
is($node->safe_psql('sink', q{SELECT string_agg(n::text, ' ' ORDER BY seq) FROM received WHERE topic = 'orders_app'}),
	'1 2 4', 'its neighbours are delivered once each, in order');
is($node->safe_psql('app',
	q{SELECT count(*) FROM outbox.message WHERE topic = 'orders_app' AND delivered_at IS NOT NULL AND attempts = 1}),
	'3', 'each at its first attempt');
is(worker_pid($node, 'app'), $pid, 'by the same worker process throughout');
cmp_ok(peak_private($pid, $start), '<', $bound_kb, 'which never detoasted the poison payload');

# An envelope whose text no remote server takes: 200 MB of control
# characters, each written as six bytes, make more than the 1 GB that one
# protocol message may carry.
$node->safe_psql('app', q{
	SELECT outbox.append('orders_app', 'evt.order.v1', to_jsonb(repeat(chr(1), 200000000)), '01890a5d-ac96-774b-bcce-000000000015');
	SELECT outbox.append('orders_app', 'evt.order.v1', '{"n": 6}', '01890a5d-ac96-774b-bcce-000000000016');
});
ok(wait_for($node, 'app', q{SELECT dead_at IS NOT NULL FROM outbox.message WHERE id = '01890a5d-ac96-774b-bcce-000000000015'}, 't', 60),
	'a message whose envelope text is too long ends dead');
is($node->safe_psql('app', q{SELECT attempts, last_error FROM outbox.message WHERE id = '01890a5d-ac96-774b-bcce-000000000015'}),
	"3|54000: envelope text would exceed 1073676286 bytes", 'after max_attempts attempts, with its error');
is($node->safe_psql('sink', q{SELECT string_agg(n::text, ' ' ORDER BY seq) FROM received WHERE topic = 'orders_app'}),
	'1 2 4 6', 'and the message after it is delivered once');
is(worker_pid($node, 'app'), $pid, 'by the same worker process');

# 3. The same through drain_once, which also reaches the other topics.
$node->safe_psql('manual', q{
	SELECT outbox.route_notify('other', 'other_events');
	SELECT outbox.append('other', 'evt.other.v1', '{}');
});
$poison = append_with_poison('manual', 'orders_manual', '2');
is($node->safe_psql('manual', 'SELECT outbox.drain_once()'), '4',
	'drain_once returns normally: the three neighbours and the other topic delivered');
is($node->safe_psql('manual',
	"SELECT attempts, dead_at IS NULL, available_at > now(), last_error FROM outbox.message WHERE id = '$poison'"),
	"1|t|t|$poison_error", 'the attempt of the poison message is counted, and it backs off');
ok(wait_for($node, 'manual',
	"SELECT outbox.drain_once(); SELECT attempts, dead_at IS NOT NULL FROM outbox.message WHERE id = '$poison'",
	"0\n3|t", 60),
	'drain_once after drain_once, it dies after max_attempts');
is($node->safe_psql('sink', q{SELECT string_agg(n::text, ' ' ORDER BY seq) FROM received WHERE topic = 'orders_manual'}),
	'1 2 4', 'its neighbours were sent once each, in order');
unlike(slurp_file($node->logfile), qr/total size of jsonb/, 'no error about the envelope was ever raised');

# 4. Ten compressible 50 MB payloads on a NOTIFY route: sent truncated,
# never detoasted.
$node->safe_psql('app', q{SELECT outbox.route_notify('bulk', 'bulk_events')});
$listener = $node->background_psql('app');
$listener->query_safe('LISTEN bulk_events');
$start = peak_start($pid);
ok(deliver_large('bulk', 10, 50_000_000), 'ten 50 MB payloads are delivered');
my @notes = notifications($listener, 'SELECT 1', 'bulk_events', 10);
is(scalar(grep { /^\{"id": "[0-9a-f-]{36}", "type": "evt\.large\.v1", "truncated": true, "occurredAt": "[0-9T:.-]+Z"\}$/ } @notes),
	10, 'all ten truncated');
$listener->quit;
cmp_ok(peak_private($pid, $start), '<', $bound_kb, 'the worker stays under 64 MB');

# 5. A remote command that returns a million rows of 100 bytes and more:
# read one row at a time.
$node->safe_psql('app', q{
	SELECT outbox.route_remote('wide', 'sink',
		'SELECT g, $2, repeat(''x'', 100) FROM generate_series(1, 1000000) g WHERE $1 IS NOT NULL');
});
$start = peak_start($pid);
$node->safe_psql('app', q{SELECT outbox.append('wide', 'evt.wide.v1', '{}')});
ok(wait_for($node, 'app', q{SELECT delivered_at IS NOT NULL FROM outbox.message WHERE topic = 'wide'}, 't', 60),
	'the command that returns a million rows completes the message');
cmp_ok(peak_private($pid, $start), '<', $bound_kb, 'the worker stays under 64 MB');

# 6. A remote batch of five 20 MB payloads holds one envelope at a time.
$node->safe_psql('app', q{
	SELECT outbox.route_remote('big', 'sink',
		'INSERT INTO public.big_received (id, len) VALUES (($1->>''id'')::uuid, length($1->>''payload''))');
});
my $sessions = q{SELECT count(*) FROM pg_stat_activity WHERE datname = 'sink' AND application_name = 'krizaka_outbox'};
is($node->safe_psql('sink', $sessions), '1', 'the worker keeps its connection to the remote server between messages');
$start = peak_start($pid);
ok(deliver_large('big', 5, 20_000_000), 'five 20 MB payloads are delivered to the remote server');
ok(wait_for($node, 'sink', $sessions, '0', 10), 'but not a connection that carried 20 MB in one message');
is($node->safe_psql('sink', q{SELECT count(*), min(len), max(len) FROM big_received}), '5|20000000|20000000',
	'whole');
cmp_ok(peak_private($pid, $start), '<', $bound_kb + 3 * 20000000 / 1024,
	'the worker stays under 64 MB and three times one message');
cmp_ok(memory($pid)->{RssAnon}, '<', $bound_kb, 'and under 64 MB once it is sent');
is(worker_pid($node, 'app'), $pid, 'the same worker process from start to end');

$node->stop;
done_testing();
