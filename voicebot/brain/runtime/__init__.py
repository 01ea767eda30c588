"""The session runtime around a turn, apart from the dialogue: history, the lease, the urgent
check's and the guard's race with the turn, merging the output, storing."""
