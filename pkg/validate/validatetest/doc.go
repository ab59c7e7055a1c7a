// Package validatetest proves that every service refuses a bad name with the same rule: it
// walks the request messages of a service, finds every string field whose name has one meaning
// across millwright (Fields), and runs each bad value of that field's rule (Bad) through the
// service's validator registry on an otherwise valid request.
package validatetest
