package paging

// Page is a List request's paging, parsed: how many rows to answer and the key to start after.
// Every List handler has the same three steps (parse, read Limit rows after After, Next), so
// they are here once rather than in each handler.
type Page struct {
	Size    int      // rows to answer
	After   []string // the last key of the previous page; nil for the first page
	filters string
}

// Request is what every List request has (the generated getters of page_size and
// page_token).
type Request interface {
	GetPageSize() int32
	GetPageToken() string
}

// Parse checks a request's page_size and page_token (the token must have been issued for
// these filters, with n key parts); a bad one is InvalidArgument naming its field.
func Parse(size int32, token, filters string, n int) (Page, error) {
	s, err := Size(size)
	if err != nil {
		return Page{}, err
	}
	after, err := Decode(token, filters, n)
	if err != nil {
		return Page{}, err
	}
	return Page{Size: s, After: after, filters: filters}, nil
}

// Limit is how many rows to read: one more than the page, which tells whether a next page
// exists without a count.
func (p Page) Limit() int { return p.Size + 1 }

// Next trims rows (read with Limit, in key order) to the page and returns the next page's
// token: "" when rows was the last page.
func Next[T any](p Page, rows []T, key func(T) []string) ([]T, string) {
	if len(rows) <= p.Size {
		return rows, ""
	}
	rows = rows[:p.Size]
	return rows, Encode(p.filters, key(rows[p.Size-1])...)
}
