# test/valgrind-report.pl: read the memcheck logs of a `test/run --valgrind`
# run (one per server process) and judge them.
#
#   perl test/valgrind-report.pl DIR/*.log
#
# An error is one record of a log: its message and stacks (with the origin of
# an uninitialised value, when memcheck found it).  An error with a frame in
# krizaka_outbox (the library, or one of its source files) is ours: it is
# printed in full and the run fails.  The others, in PostgreSQL or the C
# library, are counted and summed up by their first frame; the errors that
# test/valgrind.supp suppressed are counted from each process's summary.
use strict;
use warnings;

my $ours_re = qr{krizaka_outbox\.so|\((?:src/)?(?:outbox_\w+|krizaka_outbox)\.c:\d+\)};

# A frame of the library that only passes the call on: the utility hook,
# through which every utility statement of the server goes.
my $pass_through_re = qr{\bobx_process_utility\b};

my ($processes, $suppressed) = (0, 0);

# Is one of the record's frames ours, a pass-through frame calling straight
# into the server not counting?
sub obx_is_ours
{
	my ($r) = @_;
	my $callee = '';
	for my $line (@$r)
	{
		if ($line !~ /^\s+(?:at|by) 0x/)
		{
			$callee = '';
			next;
		}
		return 1
		  if $line =~ $ours_re
		  && !($line =~ $pass_through_re && $callee =~ /\bstandard_ProcessUtility\b/);
		$callee = $line;
	}
	return 0;
}
my (@ours, %others);

for my $file (@ARGV)
{
	open my $fh, '<', $file or die "$file: $!\n";
	$processes++;
	my (@records, @record);
	while (my $line = <$fh>)
	{
		if ($line =~ /^==\d+== ?(.*)$/)
		{
			my $text = $1;
			if ($text =~ /^\s*$/)
			{
				push @records, [@record] if @record;
				@record = ();
			}
			else
			{
				push @record, $text;
			}
		}
		else
		{
			# a suggested suppression, printed without the pid prefix
			push @records, [@record] if @record;
			@record = ();
		}
	}
	push @records, [@record] if @record;
	close $fh;

	for my $r (@records)
	{
		my ($summary) = grep { /ERROR SUMMARY: .*\(suppressed: \d+ from/ } @$r;
		if (defined $summary)
		{
			$summary =~ /\(suppressed: (\d+) from/;
			$suppressed += $1;
			next;
		}
		next unless grep { /^\s+at 0x/ } @$r;
		next if $r->[0] =~ /^Process terminating/;
		if (obx_is_ours($r))
		{
			push @ours, join("\n", "$file:", map { "  $_" } @$r);
		}
		else
		{
			my ($top) = grep { /^\s+at 0x/ } @$r;
			$top =~ s/^\s+at 0x[0-9A-F]+: //;
			$others{"$r->[0] at $top"}++;
		}
	}
}

my $others = 0;
$others += $_ for values %others;
printf "%d server processes; %d error contexts in krizaka_outbox, %d elsewhere (not suppressed), %d errors suppressed by test/valgrind.supp\n",
  $processes, scalar(@ours), $others, $suppressed;
for my $k (sort { $others{$b} <=> $others{$a} || $a cmp $b } keys %others)
{
	printf "  ignored %4d  %s\n", $others{$k}, $k;
}
print "$_\n" for @ours;
exit(@ours ? 1 : 0);
