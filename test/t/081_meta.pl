# META.json is valid PGXN metadata (Meta Spec 1.0.0) and agrees with the
# control file, the install scripts and the changelog.
use strict;
use warnings;
use JSON::PP;
use Test::More;

my $root = $ENV{TESTDIR} // '.';
sub slurp { my ($f) = @_; open my $fh, '<', "$root/$f" or die "$f: $!"; local $/; return <$fh>; }

my $meta = eval { JSON::PP->new->decode(slurp('META.json')) };
ok($meta, 'META.json is JSON') or BAIL_OUT($@);

my $semver = qr/^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$/;
for my $key (qw(name abstract version maintainer license provides meta-spec))
{
	ok(exists $meta->{$key}, "required key $key");
}
like($meta->{name}, qr/^[A-Za-z][A-Za-z0-9_-]*$/, 'name is a valid distribution name');
like($meta->{version}, $semver, 'version is a semantic version');
is($meta->{'meta-spec'}{version}, '1.0.0', 'meta-spec version 1.0.0');
like($meta->{'meta-spec'}{url}, qr{^https?://pgxn\.org/meta/spec\.txt$}, 'meta-spec url');
ok(!ref($meta->{abstract}) && length($meta->{abstract}) > 0, 'abstract is a non-empty string');
my @maint = ref $meta->{maintainer} ? @{ $meta->{maintainer} } : ($meta->{maintainer});
ok(@maint && !grep({ !/\S/ } @maint), 'maintainer is a string or a list of strings');
my %licenses = map { $_ => 1 } qw(agpl_3 apache_1_1 apache_2_0 artistic_1 artistic_2 bsd gpl_1 gpl_2
  gpl_3 lgpl_2_1 lgpl_3_0 mit mozilla_1_0 mozilla_1_1 openssl perl_5 postgresql qpl_1_0 ssleay sun
  zlib open_source restricted unrestricted unknown);
ok($licenses{ ref $meta->{license} ? '' : $meta->{license} }, "license $meta->{license} is a PGXN license name");

# provides: one entry per extension, with a file that exists and a semver
my ($control) = slurp('krizaka_outbox.control') =~ /^default_version\s*=\s*'([^']+)'/m;
my $p = $meta->{provides}{krizaka_outbox};
ok($p, 'provides krizaka_outbox');
like($p->{version}, $semver, 'provided version is a semantic version');
is($p->{version}, "$control.0", "provided version is the control file's $control");
is($meta->{version}, "$control.0", "distribution version is the control file's $control");
ok(-f "$root/$p->{file}", "provided file $p->{file} exists");
ok(-f "$root/$p->{docfile}", "docfile $p->{docfile} exists") if $p->{docfile};
ok(-f "$root/krizaka_outbox--$control.sql", "install script for $control exists");
like(slurp('CHANGELOG.md'), qr/^## \Q$control\E\b/m, "CHANGELOG has a section for $control");

# prereqs: phase -> relation -> { name => version }
while (my ($phase, $rels) = each %{ $meta->{prereqs} // {} })
{
	like($phase, qr/^(configure|build|test|runtime|develop)$/, "prereq phase $phase");
	while (my ($rel, $mods) = each %$rels)
	{
		like($rel, qr/^(requires|recommends|suggests|conflicts)$/, "prereq relation $rel");
		like($_, $semver, "prereq version $_") for values %$mods;
	}
}
ok(!exists $meta->{resources} || ref $meta->{resources} eq 'HASH', 'resources is an object');
done_testing();
