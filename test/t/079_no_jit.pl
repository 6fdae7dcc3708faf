# The statements of the store are planned without JIT compilation, whatever
# the session's settings.  On a large table the generic plan of a statement
# that reads up to a window of rows (the worker's next-due reading) was
# priced above jit_above_cost, so every execution compiled its expressions
# (milliseconds each) and the worker loaded LLVM.  Here jit_above_cost = 0
# makes every plan qualify; auto_explain logs every statement the API
# functions and the worker run, in JSON, and a compiled plan says "JIT".
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('nojit', 'app', q{
shared_preload_libraries = 'krizaka_outbox, auto_explain'
outbox.worker_naptime_ms = 200
jit = on
jit_above_cost = 0
jit_inline_above_cost = -1
jit_optimize_above_cost = -1
auto_explain.log_min_duration = 0
auto_explain.log_nested_statements = on
auto_explain.log_format = json
});

if ($node->safe_psql('postgres', 'SELECT pg_jit_available()') ne 't')
{
	$node->stop;
	plan skip_all => 'this server cannot compile with JIT';
}

$node->safe_psql('postgres', 'CREATE DATABASE app');
# (the extension's script runs statements of its own, with the session's settings)
$node->safe_psql('app', 'CREATE EXTENSION krizaka_outbox');
my $log_start = -s $node->logfile;

# Every statement of the test itself is marked /* top */: those are the
# caller's, compiled as the session says.
$node->safe_psql('app', q{
/* top */ SELECT outbox.route_notify('live', 'live_events');
/* top */ SELECT outbox.append('t', 'evt.t.v1', '{"n": 1}');
/* top */ SELECT outbox.append('t', 'evt.t.v1', '{"n": 2}', '00000000-0000-7000-8000-000000000002');
/* top */ SELECT count(*) FROM outbox.append_batch('t', 'evt.t.v1', ARRAY['3', '4', '5', '6']::jsonb[]);
/* top */ SELECT outbox.append('t', 'evt.t.v1', '{"n": 7}', available_at => now() + interval '1 hour');
/* top */ SELECT outbox.complete(id, 'w') FROM outbox.claim('w', 't', 2);
/* top */ SELECT outbox.complete_many(array_agg(id), 'w') FROM outbox.claim('w', 't', 2);
/* top */ SELECT count(*) FROM outbox.complete_and_claim('{}', 'w', 't', 2);
/* top */ SELECT outbox.extend(id, 'w', 60), outbox.fail(id, 'w', 'boom') FROM outbox.claim('w', NULL, 1);
/* top */ SELECT outbox.retry_dead_topic('t');
/* top */ SELECT outbox.consume_once('c', '00000000-0000-7000-8000-000000000002');
/* top */ SELECT outbox.envelope_by_id('00000000-0000-7000-8000-000000000002') IS NOT NULL;
/* top */ SELECT outbox.drain_once('live');
/* top */ SELECT outbox.purge('0');
/* top */ SELECT count(*) FROM outbox.topic_stats;
});

# the worker delivers to the route, then reads when the topic is next due
$node->safe_psql('app', q{/* top */ SELECT outbox.append('live', 'evt.live.v1', '{"n": 8}')});
ok( $node->poll_query_until('app', q{
		/* top */ SELECT count(*) = 1 FROM outbox.message WHERE topic = 'live' AND delivered_at IS NOT NULL}),
	'the worker delivered');
$node->wait_for_log(qr/GREATEST\(available_at, leased_until\)/, $log_start);

my $log = slurp_file($node->logfile, $log_start);
my (@top, @library);
for my $entry (split /LOG:  duration: [0-9.]+ ms  plan:/, $log)
{
	next unless $entry =~ /"Query Text": "((?:[^"\\]|\\.)*)"/;
	my $text = $1;
	my $compiled = $entry =~ /"JIT":/ ? 1 : 0;
	if ($text =~ m{/\* top \*/})
	{
		push @top, $compiled;
	}
	else
	{
		push @library, [ $text, $compiled ];
	}
}

# JIT was in force for the caller's statements
cmp_ok(scalar(grep { $_ } @top), '>', 10, "the caller's statements were compiled");
# and none of the library's own was compiled, the worker's included
cmp_ok(scalar(@library), '>', 20, 'auto_explain logged the statements of the library');
ok((grep { $_->[0] =~ /GREATEST\(available_at, leased_until\)/ } @library),
	"the worker's next-due reading is among them");
is(join("\n", map { $_->[0] } grep { $_->[1] } @library), '',
	'no statement of the library was compiled by JIT');

$node->stop;
done_testing();
