package httpcore

import (
	"bytes"
	"io"
	"mime"
	"mime/multipart"
	"strings"
)

// Limits on the multipart/form-data bodies fingerprinted by their parts. A
// body past them is fingerprinted as its bytes. The body itself is already
// at most Options.MaxBodyBytes, so the work is linear in it either way.
const (
	// maxFormParts is the most parts a form may have, as in
	// multipart.Reader.ReadForm.
	maxFormParts = 1000
	// maxPartHeaderBytes is the most bytes of header names and values one
	// part may have.
	maxPartHeaderBytes = 8 << 10
)

// formBoundary returns the boundary of a multipart/form-data Content-Type,
// or "" if ct is another type or has no usable boundary.
func formBoundary(ct string) string {
	for len(ct) > 0 && (ct[0] == ' ' || ct[0] == '\t') {
		ct = ct[1:]
	}
	if len(ct) < len("multipart/form-data") || ct[0]|0x20 != 'm' || !strings.EqualFold(ct[:len("multipart/")], "multipart/") {
		return "" // the common case, without parsing
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/form-data" {
		return ""
	}
	return params["boundary"]
}

// writeForm writes to w what the parts of the multipart/form-data body
// contribute to the fingerprint (see fingerprint), and reports whether the
// body parsed as such within the limits; if not, what it wrote must be
// discarded.
func (s *fpState) writeForm(w io.Writer, body []byte, boundary string) bool {
	// Each part starts with a delimiter: more delimiters than allowed parts
	// means too many parts, without parsing any.
	if bytes.Count(body, []byte("--"+boundary)) > maxFormParts+1 {
		return false
	}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for n := 0; ; n++ {
		p, err := mr.NextRawPart() // raw: the content as sent, Content-Transfer-Encoding kept
		if err == io.EOF {         // only after the closing delimiter
			return true
		}
		if err != nil || n == maxFormParts {
			return false
		}
		size := 0
		for k, vs := range p.Header {
			for _, v := range vs {
				size += len(k) + len(v)
			}
		}
		if size > maxPartHeaderBytes {
			return false
		}
		b := s.part[:0]
		cd, hasCD := header(p.Header, "Content-Disposition")
		disposition, params, err := mime.ParseMediaType(cd)
		if err != nil {
			disposition, params = strings.TrimSpace(cd), nil // kept as sent
		}
		b = opt(b, disposition, hasCD)
		name, hasName := params["name"]
		b = opt(b, name, hasName)
		filename, hasFilename := params["filename"]
		b = opt(b, filename, hasFilename)
		ctype, hasType := header(p.Header, "Content-Type")
		if mt, tparams, err := mime.ParseMediaType(ctype); err == nil {
			ctype = mime.FormatMediaType(mt, tparams)
		}
		b = opt(b, strings.TrimSpace(ctype), hasType)
		cte, hasCTE := header(p.Header, "Content-Transfer-Encoding")
		b = opt(b, strings.ToLower(strings.TrimSpace(cte)), hasCTE)

		s.ph.Reset()
		if _, err := io.CopyBuffer(s.ph, p, s.copyBuf[:]); err != nil {
			return false
		}
		b = s.ph.Sum(b)
		s.part = b
		_, _ = w.Write(b)
	}
}

// header returns the first value of a part's header and whether it has one.
func header(h map[string][]string, name string) (string, bool) {
	vs := h[name]
	if len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// opt appends an optional string: 0 if absent, else 1 and the string with
// its length, so that absent and empty differ.
func opt(b []byte, s string, ok bool) []byte {
	if !ok {
		return append(b, 0)
	}
	return field(append(b, 1), s)
}

// encodings returns the codings of a Content-Encoding header other than
// identity, lower case and comma-separated, or "" if there are none.
func encodings(vs []string) string {
	if len(vs) == 0 {
		return "" // the common case
	}
	var b strings.Builder
	for _, v := range vs {
		for c := range strings.SplitSeq(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			if c == "" || c == "identity" {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(c)
		}
	}
	return b.String()
}
