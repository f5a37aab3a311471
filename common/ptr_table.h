// A table of objects linked through a hook inside each (a Boost.Intrusive
// list): adding allocates nothing, removing is O(1), iteration yields T*.
//
// An object is in at most one table per hook; remove() names the table
// that holds it, and erase(it) removes while iterating.  The table holds
// no reference: whoever adds follows the owner's rule (a Conn's table
// reference, a CmUser owned by its rdma_cm operation).  safe_link: a hook
// is unlinked when its table lets go, and linking a linked one asserts.
#pragma once
#include <boost/intrusive/list.hpp>
#include <cstddef>

namespace xp {

using TableHook =
    boost::intrusive::list_member_hook<boost::intrusive::link_mode<boost::intrusive::safe_link>>;

template <class T, TableHook T::*H> class PtrTable {
  using List = boost::intrusive::list<T, boost::intrusive::member_hook<T, TableHook, H>>;

public:
  class iterator {
  public:
    explicit iterator(typename List::iterator it) : it_(it) {}
    T* operator*() const { return &*it_; }
    iterator& operator++() {
      ++it_;
      return *this;
    }
    bool operator==(const iterator& o) const { return it_ == o.it_; }

  private:
    friend class PtrTable;
    typename List::iterator it_;
  };

  PtrTable() = default;
  PtrTable(const PtrTable&) = delete;
  PtrTable& operator=(const PtrTable&) = delete;

  void add(T* x) { l_.push_back(*x); }
  // false: x is in no table of this hook (removed before).
  bool remove(T* x) {
    if (!(x->*H).is_linked()) return false;
    l_.erase(List::s_iterator_to(*x));
    return true;
  }
  iterator erase(iterator it) { return iterator(l_.erase(it.it_)); }
  static bool linked(const T* x) { return (x->*H).is_linked(); }
  bool empty() const { return l_.empty(); }
  size_t size() const { return l_.size(); }
  T* front() { return &l_.front(); }
  iterator begin() { return iterator(l_.begin()); }
  iterator end() { return iterator(l_.end()); }
  void clear() { l_.clear(); }

private:
  List l_;
};

} // namespace xp
