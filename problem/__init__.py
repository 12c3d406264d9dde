"""The problem as the leaderboard poses it: its case lists and the checks of the input tuple."""
