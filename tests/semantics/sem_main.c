// Socket semantics suite: the main (unfortified) binary.  See sem.h and run.sh.
#include "sem.h"

int main(int argc, char** argv) {
  static const struct sem_case* const groups[] = {
      sem_connect_cases, sem_epoll_cases, sem_poll_cases, sem_io_cases,        sem_fd_cases,
      sem_proc_cases,    sem_data_cases,  sem_misc_cases, sem_wait_sets_cases, NULL,
  };
  return sem_main(argc, argv, groups);
}
