# The address filter of HTTP routes.  A request leaves from the database
# server, inside its network: the address a call actually connects to is
# refused when it is loopback or private, whether the URL gives it (an IP
# literal) or a name resolves to it (localhost), unless
# outbox.http_allow_private is on or outbox.http_private_networks holds it.
# A refusal is decided before anything is sent (the receiver sees no
# request), is an unreachable outcome that names the address and the
# setting, and follows the settings as a reload changes them.  Only a
# superuser may change them.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use OutboxHttp;

my $rx = OutboxHttp->start;
# (the breaker is kept out of the way: refusals count for it)
my $node = http_node('ssrf', 'app', "outbox.backoff_seconds = 30\noutbox.remote_pause_after = 10\n");

# Set the two settings by ALTER SYSTEM and reload; returns once a new
# session shows them, that is once the postmaster has passed the reload
# on to the worker, which applies it when it next wakes, before any
# delivery.
sub settings
{
	my ($networks, $allow) = @_;
	$node->safe_psql('postgres', 'ALTER SYSTEM SET outbox.http_private_networks = ' . lit($networks));
	$node->safe_psql('postgres', "ALTER SYSTEM SET outbox.http_allow_private = $allow");
	$node->reload;
	ok($node->poll_query_until('app',
			q{SELECT current_setting('outbox.http_private_networks') || '/' || current_setting('outbox.http_allow_private')},
			"$networks/$allow"),
		"settings: http_private_networks = '$networks', http_allow_private = $allow");
	return;
}

# The refusal as the outbox tables show it: the route's last_failure and
# the message's last_error.
sub refusal
{
	my ($topic) = @_;
	return $node->safe_psql('app', qq{
		SELECT coalesce(r.last_failure, '') || ' / ' || coalesce(m.last_error, '')
		  FROM outbox.routes r JOIN outbox.message m USING (topic)
		 WHERE topic = '$topic' ORDER BY m.seq DESC LIMIT 1});
}

$node->safe_psql('app', join(";\n", route_http('ip', $rx->url('/ip')), route_http('name', $rx->url('/name', host => 'localhost'))));

# 1. With 127.0.0.1/32 in outbox.http_private_networks both deliver: the
# receiver is reachable.
$node->safe_psql('app', q{SELECT outbox.append(t, 'evt.x.v1', '{"n": 1}') FROM unnest('{ip,name}'::text[]) t});
ok(wait_for($node, 'app', q{SELECT count(*) FROM outbox.message WHERE delivered_at IS NOT NULL}, '2', 15),
	'allowed by outbox.http_private_networks: both routes deliver');
is(scalar($rx->requests('/ip')) . '/' . scalar($rx->requests('/name')), '1/1', 'one request each');

# 2. Without it (reloaded), the loopback address is refused at connect.
# (A message's attempts count from its claim; its failure is recorded, and
# its lease ended, when the call is through: the waits below wait for that.)
settings('', 'off');
my $ip1 = $node->safe_psql('app', q{SELECT outbox.append('ip', 'evt.x.v1', '{"n": 2}')});
ok(wait_for($node, 'app', "SELECT attempts FROM outbox.message WHERE id = '$ip1' AND leased_until IS NULL", '1', 15), 'the call to 127.0.0.1 failed');
my $why = refusal('ip');
like($why, qr/127\.0\.0\.1/, "the refusal names the address ($why)");
like($why, qr/outbox\.http_(allow_private|private_networks)/, 'and the setting that would allow it');
is($node->safe_psql('app', "SELECT dead_at IS NULL AND delivered_at IS NULL FROM outbox.message WHERE id = '$ip1'"), 't',
	'unreachable: the message waits for a retry');
is($node->safe_psql('app', q{SELECT consecutive_failures FROM outbox.routes WHERE topic = 'ip'}), '1',
	'and the refusal counts for the route\'s breaker');

# a name that resolves to a loopback address is refused as well
my $name1 = $node->safe_psql('app', q{SELECT outbox.append('name', 'evt.x.v1', '{"n": 2}')});
ok(wait_for($node, 'app', "SELECT attempts FROM outbox.message WHERE id = '$name1' AND leased_until IS NULL", '1', 15), 'the call to localhost failed');
$why = refusal('name');
like($why, qr/127\.0\.0\.1|::1/, "the refusal names the address localhost resolved to ($why)");
is(scalar($rx->requests('/ip')) . '/' . scalar($rx->requests('/name')), '1/1', 'the receiver saw no further request');

# a list that does not hold the address allows nothing more
settings('10.0.0.0/8,192.168.0.0/16', 'off');
$node->safe_psql('app', "UPDATE outbox.message SET available_at = now() WHERE id = '$ip1'");
my $ip2 = $node->safe_psql('app', q{SELECT outbox.append('ip', 'evt.x.v1', '{"n": 3}')});
ok(wait_for($node, 'app', "SELECT attempts FROM outbox.message WHERE id = '$ip1' AND leased_until IS NULL", '2', 15),
	'other private networks allowed: 127.0.0.1 is still refused');
is(scalar $rx->requests('/ip'), 1, 'nothing reached the receiver');

# 3. Only a superuser may change the settings.
$node->safe_psql('app', 'CREATE ROLE mallory LOGIN');
for my $setting ('outbox.http_allow_private = on', q{outbox.http_private_networks = '127.0.0.0/8'})
{
	my ($rc, $out, $err) = $node->psql('app', "SET ROLE mallory; SET $setting");
	like($err, qr/permission denied to set parameter "outbox\.http_(allow_private|private_networks)"/,
		"a role that is not a superuser cannot SET $setting");
}
my ($rc, $out, $err) = $node->psql('app', q{SET ROLE mallory; SET outbox.http_private_networks = 'not a network'});
like($err, qr/permission denied|invalid value/, 'nor anything else');
($rc, $out, $err) = $node->psql('app', q{SET outbox.http_private_networks = '127.0.0.1/33'});
like($err, qr/invalid value for parameter "outbox\.http_private_networks"/, 'a bad CIDR is refused');

# 4. With outbox.http_allow_private on, the same routes deliver.
settings('', 'on');
$node->safe_psql('app', q{UPDATE outbox.message SET available_at = now() WHERE delivered_at IS NULL});
$node->safe_psql('app', q{SELECT outbox.append(t, 'evt.x.v1', '{"n": 4}') FROM unnest('{ip,name}'::text[]) t});
ok(wait_for($node, 'app', q{SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL}, '0', 15),
	'allowed by outbox.http_allow_private: every message is delivered');
my %seen;
$seen{ $_->{headers}{'webhook-id'} }++ for $rx->requests;
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message}), scalar(keys %seen), 'each message reached the receiver');
is(join(',', grep { $seen{$_} != 1 } sort keys %seen), '', 'once');
is(scalar($rx->requests('/ip')) . '/' . scalar($rx->requests('/name')), '4/3', 'by the URL of its route');

$node->stop;
done_testing();
