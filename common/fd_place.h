// Where xpress keeps the file descriptors it opens for itself: above the
// numbers a program expects to get.  A program may count on the lowest free
// number (a number it just closed must stay closed: EBADF, POLLNVAL), and
// daemons dup2 onto or close low numbers; an internal fd made lazily would
// take exactly such a number.  Not too high either: the kernel's fd table
// grows to the highest number in use.
#pragma once

namespace xp {

// Moves fd (close-on-exec) to the high range and returns the new number;
// returns fd unchanged when it is already there or cannot be moved.
int place_high(int fd);

// Whether fd is one xpress placed for itself (place_high records them), so
// that a program's close_range/closefrom does not take xpress's own fds.
bool is_internal(int fd);
// The next internal fd >= from, or -1.
int next_internal(int from);

} // namespace xp
